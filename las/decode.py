"""`las decode`: load a checkpoint, transcribe a manifest, an audio file or a folder, write the result."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from las.checkpoint import load_checkpoint
from las.data.dataset import SpeechDataset
from las.data.features import FeatureCache
from las.data.manifest import check_characters, read_utterances
from las.device import resolve_device
from las.inference import transcribe
from las.search import GreedySearch, Strategy
from las.text import Vocabulary
from las.transcripts import Transcript, write_transcripts


@dataclass(frozen=True)
class DecodeSummary:
    utterances: int
    seconds: float
    audio_seconds: float

    @property
    def real_time_factor(self) -> float:
        return self.seconds / max(self.audio_seconds, 1e-9)


def build_strategy(name: str, vocabulary: Vocabulary, max_length_ratio: float) -> Strategy:
    if name == "greedy":
        return GreedySearch(vocabulary.sos, vocabulary.eos, max_length_ratio)
    raise ValueError(f"unknown strategy {name!r}")  # the CLI's choices keep this unreachable


def decode(
    checkpoint_path: str | Path,
    input_path: str | Path,
    out: str | Path | None = None,
    output_format: str = "csv",
    strategy: str = "greedy",
    batch_size: int | None = None,
    device_name: str = "auto",
) -> DecodeSummary:
    checkpoint = load_checkpoint(checkpoint_path)
    config = checkpoint.config
    device = resolve_device(device_name)
    vocabulary = checkpoint.vocabulary
    utterances = read_utterances(input_path, require_text=False)
    check_characters(utterances, vocabulary, input_path)
    features = FeatureCache(config.data.cache_dir, config.features).load_all(utterances, "features")
    frames = sum(item.shape[0] for item in features)
    dataset = SpeechDataset(
        [utterance.id for utterance in utterances],
        [checkpoint.normalizer(item) for item in features],
        [utterance.text for utterance in utterances],
        vocabulary,
        with_targets=False,
    )
    model = checkpoint.build_model(device)
    started = time.perf_counter()
    results = transcribe(
        model,
        dataset,
        build_strategy(strategy, vocabulary, config.decode.max_length_ratio),
        batch_size or config.decode.batch_size,
        config.data.max_batch_frames,
        device,
    )
    seconds = time.perf_counter() - started
    transcripts = [
        Transcript(identifier, vocabulary.decode(best[0].tokens), {"score": round(best[0].score, 4)})
        for identifier, best in zip(dataset.ids, results, strict=True)
    ]
    if out is None:
        write_transcripts(transcripts, output_format, sys.stdout)
    else:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        temporary = out.with_name(f".{out.name}.tmp")
        with open(temporary, "w", encoding="utf-8") as stream:
            write_transcripts(transcripts, output_format, stream)
        os.replace(temporary, out)
    return DecodeSummary(len(transcripts), seconds, frames * config.features.hop_ms / 1000)
