"""Training's dev pass: greedy dev CER and how diagonal its attention maps are, each rank
decoding its shard of dev."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from las.core.config import Config
from las.core.metrics import character_error_rate, word_error_rate
from las.data.dataset import SpeechDataset
from las.model.alignment import Alignment
from las.model.las import LAS
from las.recognition.inference import transcribe
from las.recognition.plots import plot_hypothesis
from las.search import GreedySearch, Hypothesis
from las.training.distributed import Distributed


def evaluate_dev(
    model: LAS,
    dataset: SpeechDataset,
    search: GreedySearch,
    config: Config,
    device: torch.device,
    plot_path: Path,
    distributed: Distributed = Distributed(),
) -> DevResult:
    """Greedy dev CER (no teacher forcing), the share of dev utterances decoded with a diagonal
    attention map, and the map of the first dev utterance, plotted and measured (by rank 0 only).
    Each rank decodes its shard of dev; every rank gets the figures of all of it."""
    indices = distributed.shard(range(len(dataset)))
    results = transcribe(
        model, dataset.subset(indices), search, config.decode.batch_size, config.data.max_batch_frames, device, "dev"
    )
    best = [hypotheses[0] for hypotheses in results]
    vocabulary = dataset.vocabulary
    alignment = None
    if distributed.is_main and best[0].attention is not None:  # rank 0's shard starts with utterance 0
        plot_hypothesis(dataset.ids[0], best[0], vocabulary, plot_path)
        alignment = Alignment.of_decoding(best[0].attention)
    decoded = [
        (index, vocabulary.decode(hypothesis.tokens), hypothesis.attention is not None and diagonal(hypothesis))
        for index, hypothesis in zip(indices, best, strict=True)
    ]
    everything = sorted(item for part in distributed.gather(decoded) for item in part)  # (index, text, diagonal)
    texts = [text for _, text, _ in everything]
    diagonal_share = sum(straight for _, _, straight in everything) / len(dataset)
    cer = character_error_rate(texts, dataset.texts)
    return DevResult(cer, word_error_rate(texts, dataset.texts), alignment, diagonal_share, texts)


def diagonal(hypothesis: Hypothesis) -> bool:
    return Alignment.of_decoding(hypothesis.attention).diagonal


@dataclass(frozen=True)
class DevResult:
    cer: float
    wer: float
    alignment: Alignment | None  # of the first dev utterance; None off rank 0 and for CTC decoding
    diagonal_share: float  # of all dev utterances
    texts: list[str]  # decoded, in dev order
