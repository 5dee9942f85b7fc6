"""Augmentation: SpecAugment (Park et al. 2019) on feature batches, and channel, noise and room
augmentation on waveforms, featurised on the fly (`WaveformAugmentation`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from las.core.config import AugmentConfig, FeatureConfig
from las.data.augmentation.channel_effects import (
    add_noise,
    babble,
    clipped,
    compressed,
    frame_levels_db,
    in_16_bits,
    pink_noise,
    reverberate,
    room_response,
    telephone,
    white_noise,
)
from las.data.front_end.audio import Segment, load_audio
from las.data.front_end.features import FilterbankExtractor, change_speed, log_mel_features

BABBLE_TALKERS = (3, 7)  # how many other utterances make one babble, drawn from this range
BABBLE_POOL = 200  # training utterances kept in memory to make babble from
QUIET_DB = (20.0, 40.0)  # a quiet microphone's drop, drawn from this range
CLIPPING_DB = (3.0, 20.0)  # how far a microphone set too hot drives the peak over full scale
# A compressor: its threshold this far under the loudest frame, its ratio, and its frames (the
# time its level follows), each drawn from its range; the result raised to a -1 dBFS peak.
COMPRESSION_DEPTH_DB = (10.0, 30.0)
COMPRESSION_RATIO = (2.0, 10.0)
COMPRESSION_FRAME_SECONDS = (0.005, 0.03)


class Source(NamedTuple):
    """Where an utterance's audio is: a file, or a segment of one."""

    audio: str  # a path: text, not a Path, which costs 0.3 KB more per utterance
    segment: Segment | None = None


Effect = Callable[[torch.Tensor], torch.Tensor]


def spec_augment(
    features: torch.Tensor,  # (batch, frames, bins), normalised: zero is the mean
    lengths: torch.Tensor,  # (batch,)
    frequency_masks: int,
    frequency_mask_width: int,
    time_masks: int,
    time_mask_width: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A copy of `features` with bands of bins and spans of frames set to zero. The draws come
    from `generator` on the CPU (the same masks on every device); the masks are made where the
    features are, from one copy of the draws that does not wait for the device."""
    batch, frames, bins = features.shape
    lengths = lengths.cpu()
    starts, widths, sizes = [], [], []  # per mask: (batch,) each, and the axis's size
    for _ in range(frequency_masks):
        width = torch.randint(0, frequency_mask_width + 1, (batch,), generator=generator)
        starts.append((torch.rand(batch, generator=generator) * (bins - width + 1)).long())
        widths.append(width)
        sizes.append(bins)
    for _ in range(time_masks):
        # A mask never covers more than a fifth of an utterance, so short ones keep their content.
        limit = torch.minimum(torch.full_like(lengths, time_mask_width), lengths // 5)
        width = (torch.rand(batch, generator=generator) * (limit + 1)).long()
        starts.append((torch.rand(batch, generator=generator) * (lengths - width + 1)).long())
        widths.append(width)
        sizes.append(frames)
    if not sizes:
        return features
    # A blocking copy to a GPU waits for all the work queued before it.
    draws = torch.stack([torch.stack(starts), torch.stack(widths)]).to(features.device, non_blocking=True)
    keep = torch.ones(batch, frames, bins, dtype=torch.bool, device=features.device)
    for mask, size in enumerate(sizes):
        start, end = draws[0, mask, :, None], (draws[0, mask] + draws[1, mask])[:, None]
        positions = torch.arange(size, device=features.device)
        span = (positions >= start) & (positions < end)  # (batch, bins) or (batch, frames)
        keep &= ~(span[:, None, :] if mask < frequency_masks else span[:, :, None])
    return features * keep


class WaveformAugmentation:
    """Per utterance and epoch, with the probabilities of an `AugmentConfig`: a reverberant room,
    then noise (babble of other training utterances, white or pink) at a random SNR, then a
    telephone line, then a gain, then a quiet or a clipping microphone's 16 bits, then a
    compressor — the order in which they happen to a real recording — and the log-mel features
    of the result. Every draw comes from the seed it is given, so an utterance in an epoch is
    augmented the same way in every process and after every resume."""

    def __init__(self, config: AugmentConfig, features: FeatureConfig, pool: Sequence[torch.Tensor]) -> None:
        """`pool`: waveforms of training utterances for babble."""
        self.config = config
        self.rate = features.sample_rate
        self.extractor = FilterbankExtractor(features)
        self.pool = list(pool)

    @classmethod
    def of(
        cls, config: AugmentConfig, features: FeatureConfig, sources: Sequence[Source], seed: int
    ) -> WaveformAugmentation:
        """With a babble pool of up to BABBLE_POOL of the `sources`, drawn with `seed`."""
        pool = []
        if config.noise > 0:
            chosen = random.Random(seed).sample(list(sources), min(BABBLE_POOL, len(sources)))
            pool = [load_audio(Path(source.audio), features.sample_rate, source.segment) for source in chosen]
        return cls(config, features, pool)

    def effects(self, generator: torch.Generator) -> list[Effect]:
        """What happens to one utterance: possibly nothing."""
        config = self.config

        def chance(probability: float) -> bool:
            return probability > 0 and torch.rand((), generator=generator).item() < probability

        def uniform(low: float, high: float) -> float:
            return low + (high - low) * torch.rand((), generator=generator).item()

        effects: list[Effect] = []
        if chance(config.reverberation):
            response = room_response(self.rate, uniform(0.2, 0.8), generator)
            effects.append(lambda waveform: reverberate(waveform, response))
        if chance(config.noise):
            kind = ["white", "pink", "babble"][int(torch.randint(3 if self.pool else 2, (), generator=generator))]
            snr = uniform(config.snr_low, config.snr_high)
            talkers = int(torch.randint(BABBLE_TALKERS[0], BABBLE_TALKERS[1] + 1, (), generator=generator))
            seed = int(torch.randint(2**62, (), generator=generator))
            effects.append(lambda waveform: add_noise(waveform, self.noise(kind, len(waveform), talkers, seed), snr))
        if chance(config.telephone):
            low, high = uniform(200, 400), uniform(3000, 3800)
            effects.append(lambda waveform: telephone(waveform, self.rate, low, high))
        if effects and config.gain_db > 0:  # only with another effect: alone, the cached features serve
            gain = 10 ** (uniform(-config.gain_db, config.gain_db) / 20)
            effects.append(lambda waveform: (waveform * gain).clamp(-1, 1))
        if chance(config.quiet):  # last: a draw without it draws all the above as before
            drop = 10 ** (-uniform(*QUIET_DB) / 20)
            effects.append(lambda waveform: in_16_bits(waveform * drop))
        if chance(config.clipping):  # after it: draws without it are what they were
            over = uniform(*CLIPPING_DB)
            effects.append(lambda waveform: clipped(waveform, over))
        if chance(config.compression):  # after it: draws without it are what they were
            depth, ratio = uniform(*COMPRESSION_DEPTH_DB), uniform(*COMPRESSION_RATIO)
            frame = round(self.rate * uniform(*COMPRESSION_FRAME_SECONDS))
            effects.append(lambda waveform: self.compressed(waveform, frame, depth, ratio))
        return effects

    @staticmethod
    def compressed(waveform: torch.Tensor, frame: int, depth_db: float, ratio: float) -> torch.Tensor:
        """Through a compressor whose threshold is `depth_db` under the loudest frame, in 16 bits."""
        if not len(waveform):
            return waveform
        threshold = float(frame_levels_db(waveform, frame).max()) - depth_db
        return in_16_bits(compressed(waveform, frame, threshold, ratio))

    def noise(self, kind: str, samples: int, talkers: int, seed: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        if kind == "babble":
            return babble(self.pool, samples, talkers, generator)
        return (white_noise if kind == "white" else pink_noise)(samples, generator)

    def features(self, source: Source, speed: float, generator: torch.Generator) -> torch.Tensor | None:
        """Log-mel features `(frames, mel_bins)` of the utterance at `source` played `speed` times
        faster and augmented as `generator` draws; None when the draw leaves it as it is."""
        effects = self.effects(generator)
        if not effects:
            return None
        waveform = change_speed(load_audio(Path(source.audio), self.rate, source.segment), speed, self.rate)
        for effect in effects:
            waveform = effect(waveform)
        return log_mel_features(self.extractor, waveform, source.audio)
