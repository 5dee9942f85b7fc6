"""Log-mel filterbank features, their on-disk cache, and global mean/variance normalisation."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torchaudio

from las.config import FeatureConfig
from las.data.audio import decode_audio, read_bytes
from las.data.manifest import Utterance
from las.errors import LasError
from las.progress import progress_bar

FEATURE_VERSION = 1  # bump when the extraction code changes what it computes


class FilterbankExtractor:
    """Waveform `(samples,)` -> log-mel features `(frames, mel_bins)`."""

    def __init__(self, config: FeatureConfig) -> None:
        self.config = config
        window = round(config.sample_rate * config.window_ms / 1000)
        self.transform = torchaudio.transforms.MelSpectrogram(
            sample_rate=config.sample_rate,
            n_fft=window,
            win_length=window,
            hop_length=round(config.sample_rate * config.hop_ms / 1000),
            n_mels=config.mel_bins,
        )

    def __call__(self, waveform: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            power = self.transform(waveform)  # (mel_bins, frames)
        return torch.log(power + 1e-6).T.contiguous()  # (frames, mel_bins)


class FeatureCache:
    """One `.npy` per utterance under `directory`, named by a hash of audio bytes and settings.

    Content keys mean a renamed or moved file is still found, and a changed file or setting is
    recomputed; files are written under a temporary name and renamed, so a killed run never leaves
    a half-written entry behind.
    """

    def __init__(self, directory: str | Path, config: FeatureConfig) -> None:
        self.directory = Path(directory)
        self.config = config
        settings = json.dumps([FEATURE_VERSION, dataclasses.asdict(config)], sort_keys=True)
        self.settings_digest = hashlib.sha256(settings.encode()).hexdigest()[:16]
        self.extractor = FilterbankExtractor(config)

    def features(self, utterance: Utterance, speed: float = 1.0) -> torch.Tensor:
        """Features `(frames, dim)` of one utterance: precomputed ones as they are, else log-mels
        (of the audio played `speed` times faster) computed only on a cache miss."""
        if utterance.features is not None:
            return torch.from_numpy(utterance.features)
        content = read_bytes(utterance.audio)
        settings = self.settings_digest + (f"speed={speed}" if speed != 1.0 else "")
        key = hashlib.sha256(content + settings.encode()).hexdigest()
        path = self.directory / key[:2] / f"{key}.npy"
        if path.exists():
            return torch.from_numpy(np.load(path))
        waveform = decode_audio(content, utterance.audio, self.config.sample_rate)
        features = self.extractor(change_speed(waveform, speed, self.config.sample_rate))
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        with open(temporary, "wb") as file:
            np.save(file, features.numpy())
        os.replace(temporary, path)
        return features

    def load_all(
        self, utterances: Sequence[Utterance], description: str = "features", speed: float = 1.0
    ) -> list[torch.Tensor]:
        return [self.features(utterance, speed) for utterance in progress_bar(utterances, description, "utt")]


def change_speed(waveform: torch.Tensor, speed: float, sample_rate: int) -> torch.Tensor:
    """Kaldi-style speed perturbation: `(samples,)` -> `(samples / speed,)`, tempo and pitch both
    scaled, by reading the waveform as if it had been recorded at `speed * sample_rate`."""
    if speed == 1.0:
        return waveform
    return torchaudio.functional.resample(waveform, round(sample_rate * speed), sample_rate)


def feature_dimension(features: Sequence[torch.Tensor], source: str | Path) -> int:
    """The one feature dimension of a corpus; mixed dimensions are an error."""
    dimensions = {item.shape[1] for item in features}
    if len(dimensions) != 1:
        raise LasError(f"{source}: utterances have features of different dimensions: {sorted(dimensions)}")
    return dimensions.pop()


@dataclass(frozen=True)
class Normalizer:
    """Global per-bin mean and standard deviation of the training features."""

    mean: torch.Tensor  # (mel_bins,)
    std: torch.Tensor  # (mel_bins,)

    @classmethod
    def fit(cls, features: Sequence[torch.Tensor]) -> Normalizer:
        # Sums in float64 so that long corpora do not lose precision.
        total = sum(item.double().sum(dim=0) for item in features)
        squares = sum(item.double().pow(2).sum(dim=0) for item in features)
        count = sum(item.shape[0] for item in features)
        mean = total / count
        std = (squares / count - mean.pow(2)).clamp_min(1e-10).sqrt()
        return cls(mean.float(), std.float())

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        return (features - self.mean) / self.std

    def to_dict(self) -> dict[str, list[float]]:
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_dict(cls, values: dict[str, list[float]]) -> Normalizer:
        return cls(torch.tensor(values["mean"]), torch.tensor(values["std"]))
