"""Training's dev pass: greedy dev CER, how diagonal its attention maps are, what the CTC head reads
of the same memory, and whether the attention has failed to align where the CTC head has learnt;
each rank decoding its shard of dev."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from las.core.config import Config
from las.core.metrics import character_error_rate, word_error_rate
from las.data.dataset import SpeechDataset
from las.model.alignment import Alignment
from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.recognition.inference import transcribe
from las.recognition.plots import plot_hypothesis
from las.search import CTCGreedySearch, GreedySearch, Hypothesis
from las.training.distributed import Distributed

# Attention that has not aligned after this many steps, while the CTC head reads dev at half its
# CER or better, is said to the user: on 13 s utterances from scratch AN4's model stayed at 70-73%
# with attention alone (maps of vertical stripes) while its CTC head learnt, for 1,039 steps.
UNALIGNED_DIAGONAL_SHARE = 0.5  # of dev utterances decoded along a diagonal: below, not aligned
CTC_LEARNT_RATIO = 0.5  # the CTC head's dev CER at most this share of the attention's


@dataclass(frozen=True)
class BothHeads:
    """The speller's greedy search and the CTC head's greedy reading of the same listener memory,
    one listener pass for both: each utterance's hypotheses are the speller's, then the CTC head's."""

    speller: GreedySearch
    ctc: CTCGreedySearch

    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        heads = zip(self.speller.search(model, memory), self.ctc.search(model, memory), strict=True)
        return [[speller[0], ctc[0]] for speller, ctc in heads]


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
    attention map, the map of the first dev utterance, plotted and measured (by rank 0 only), and
    the CTC head's greedy dev CER where the model has one. Each rank decodes its shard of dev;
    every rank gets the figures of all of it."""
    indices = distributed.shard(range(len(dataset)))
    heads = BothHeads(search, CTCGreedySearch(search.symbols)) if model.ctc_head is not None else search
    results = transcribe(
        model, dataset.subset(indices), heads, config.decode.batch_size, config.data.max_batch_frames, device, "dev"
    )
    best = [hypotheses[0] for hypotheses in results]
    vocabulary = dataset.vocabulary
    read_by_ctc = [(index, vocabulary.decode(found[-1].tokens)) for index, found in zip(indices, results, strict=True)]
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
    ctc_cer = None
    if model.ctc_head is not None:
        ctc_texts = [text for _, text in sorted(item for part in distributed.gather(read_by_ctc) for item in part)]
        ctc_cer = character_error_rate(ctc_texts, dataset.texts)
    return DevResult(cer, word_error_rate(texts, dataset.texts), alignment, diagonal_share, texts, ctc_cer)


def diagonal(hypothesis: Hypothesis) -> bool:
    return Alignment.of_decoding(hypothesis.attention).diagonal


@dataclass(frozen=True)
class DevResult:
    cer: float
    wer: float
    alignment: Alignment | None  # of the first dev utterance; None off rank 0 and for CTC decoding
    diagonal_share: float  # of all dev utterances
    texts: list[str]  # decoded, in dev order
    ctc_cer: float | None = None  # the CTC head's greedy dev CER (None without a CTC head)

    def unaligned(self) -> str:
        """Why the attention has not aligned where the CTC head has learnt, in a line; "" where it
        has aligned, or where the CTC head has not learnt either (too early to tell)."""
        if self.ctc_cer is None or self.diagonal_share >= UNALIGNED_DIAGONAL_SHARE:
            return ""
        if self.ctc_cer > CTC_LEARNT_RATIO * self.cer:
            return ""
        return (
            f"attention has not aligned: {self.diagonal_share:.0%} of dev decoded along a diagonal, the speller "
            f"alone reads dev at {self.cer:.1f}% where the CTC head reads {self.ctc_cer:.1f}%"
        )
