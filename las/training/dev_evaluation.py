"""Training's dev pass: what the model reads of dev, decoded greedily as `las decode` joins its
heads (the figure the kept models are chosen on), and by the speller and the CTC head alone; how
diagonal the attention maps are, and whether the attention has failed to align where the CTC head
has learnt; each rank decoding its shard of dev. Dev utterances longer than decoding reads are cut
at their pauses as decoding cuts them (`decode.segment_seconds`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from las.core.config import Config
from las.core.metrics import character_error_rate, word_error_rate
from las.data.dataset import Draw, SpeechDataset
from las.data.front_end.segmentation import split_at_pauses
from las.model.alignment import Alignment
from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.recognition.inference import transcribe
from las.recognition.plots import plot_hypothesis
from las.search import CTCGreedySearch, GreedySearch, Hypothesis
from las.search.scorers import Scoring
from las.training.distributed import Distributed

# Attention that has not aligned after this many steps, while the CTC head reads dev at half its
# CER or better, is said to the user: on 13 s utterances from scratch AN4's model stayed at 70-73%
# with attention alone (maps of vertical stripes) while its CTC head learnt, for 1,039 steps.
UNALIGNED_DIAGONAL_SHARE = 0.5  # of dev utterances decoded along a diagonal: below, not aligned
CTC_LEARNT_RATIO = 0.5  # the CTC head's dev CER at most this share of the attention's


@dataclass(frozen=True)
class DevSearches:
    """The dev pass's readings of one listener pass: the speller alone (greedy), and with a CTC
    head the head alone and the two joined as decoding joins them (greedy, the CTC prefix score at
    `decode.ctc_weight`); each utterance's hypotheses in that order."""

    speller: GreedySearch
    ctc: CTCGreedySearch | None = None
    joint: GreedySearch | None = None

    @classmethod
    def of(cls, search: GreedySearch, model: LAS, config: Config) -> DevSearches:
        if model.ctc_head is None:
            return cls(search)
        weight, window = config.decode.ctc_weight, config.decode.ctc_window_nats
        joint = dataclasses.replace(search, scoring=Scoring(weight, ctc_window_nats=window), cuda_graphs=False)
        return cls(search, CTCGreedySearch(search.symbols), joint if weight > 0 else None)

    def active(self) -> list[GreedySearch | CTCGreedySearch]:
        return [search for search in (self.speller, self.ctc, self.joint) if search is not None]

    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        readings = [search.search(model, memory) for search in self.active()]
        return [[found[0] for found in utterance] for utterance in zip(*readings, strict=True)]


def as_decoded(dataset: SpeechDataset, longest: int) -> tuple[SpeechDataset, list[int]]:
    """`dataset`'s utterances as decoding reads them: each longer than `longest` frames cut at its
    pauses into pieces no longer (`split_at_pauses`, without the context decoding adds at a cut
    inside speech), the others as they are; and the utterance of each piece, in order. A dev set
    of short utterances (AN4's) is `dataset` itself."""
    frame_counts = dataset.frame_counts()
    if max(frame_counts, default=0) <= longest:
        return dataset, list(range(len(dataset)))
    ids, features, owners = [], [], []
    for index, frames in enumerate(frame_counts):
        if frames <= longest:
            spans, heard = [(0, frames)], dataset.heard(Draw(index, 0))[0]
        else:
            heard = dataset.features[index]
            spans = split_at_pauses(heard, longest) or [(0, frames)]  # no speech found: read whole
        for start, end in spans:
            ids.append(f"{dataset.ids[index]}:{start}")
            features.append(heard[start:end])
            owners.append(index)
    pieces = SpeechDataset(
        ids, features, [None] * len(ids), dataset.vocabulary, with_targets=False, normalizer=dataset.normalizer
    )
    return pieces, owners


def evaluate_dev(
    model: LAS,
    dataset: SpeechDataset,
    search: GreedySearch,
    config: Config,
    device: torch.device,
    plot_path: Path,
    distributed: Distributed = Distributed(),
) -> DevResult:
    """Dev CER read greedily (no teacher forcing) by the speller alone, and with a CTC head by the
    head alone and by both joined; the share of dev utterances the speller decoded with a
    diagonal attention map, the map of the first, plotted and measured (by rank 0 only). Each rank
    decodes its shard of dev; every rank gets the figures of all of it."""
    indices = distributed.shard(range(len(dataset)))
    searches = DevSearches.of(search, model, config)
    pieces, owners = as_decoded(dataset.subset(indices), config.features.frames(config.decode.segment_seconds))
    results = transcribe(model, pieces, searches, config.decode.batch_size, config.data.max_batch_frames, device, "dev")
    vocabulary = dataset.vocabulary
    speller = [found[0] for found in results]
    alignment = None
    if distributed.is_main and speller[0].attention is not None:  # rank 0's shard starts with utterance 0
        plot_hypothesis(pieces.ids[0], speller[0], vocabulary, plot_path)
        alignment = Alignment.of_decoding(speller[0].attention)
    # Each utterance's pieces in order: each search's text of it, and whether the speller's maps are all diagonal.
    texts: list[list[list[str]]] = [[[] for _ in searches.active()] for _ in indices]
    diagonals = [True] * len(indices)
    for owner, found in zip(owners, results, strict=True):
        for words, hypothesis in zip(texts[owner], found, strict=True):
            words.append(vocabulary.decode(hypothesis.tokens))
        diagonals[owner] &= found[0].attention is not None and diagonal(found[0])
    # (index, each search's text, whether the speller's maps are diagonal), gathered over ranks in dev order
    decoded = [
        (index, *(" ".join(part for part in parts if part) for parts in read), diagonals[position])
        for position, (index, read) in enumerate(zip(indices, texts, strict=True))
    ]
    everything = sorted(item for part in distributed.gather(decoded) for item in part)
    readings = list(zip(*(item[1:-1] for item in everything), strict=True))  # one tuple of texts per search
    cers = [character_error_rate(list(texts), dataset.texts) for texts in readings]
    chosen = list(readings[2] if searches.joint is not None else readings[0])
    return DevResult(
        speller_cer=cers[0],
        wer=word_error_rate(chosen, dataset.texts),
        alignment=alignment,
        diagonal_share=sum(item[-1] for item in everything) / len(dataset),
        texts=chosen,
        ctc_cer=cers[1] if searches.ctc is not None else None,
        joint_cer=cers[2] if searches.joint is not None else None,
    )


def diagonal(hypothesis: Hypothesis) -> bool:
    return Alignment.of_decoding(hypothesis.attention).diagonal


@dataclass(frozen=True)
class DevResult:
    speller_cer: float  # the speller alone, greedy
    wer: float  # of `texts`
    alignment: Alignment | None  # of the first dev utterance; None off rank 0 and for CTC decoding
    diagonal_share: float  # of all dev utterances
    texts: list[str]  # decoded as `cer` reads them, in dev order
    ctc_cer: float | None = None  # the CTC head alone, greedy (None without a CTC head)
    joint_cer: float | None = None  # the two joined at decode.ctc_weight, greedy (None without)

    @property
    def cer(self) -> float:
        """The figure closest to how the model will be decoded, which the kept models are chosen on."""
        return self.speller_cer if self.joint_cer is None else self.joint_cer

    @property
    def reading(self) -> str:
        """What `cer` is, for the log."""
        return "speller alone, greedy" if self.joint_cer is None else "speller + CTC, greedy"

    def unaligned(self) -> str:
        """Why the attention has not aligned where the CTC head has learnt, in a line; "" where it
        has aligned, or where the CTC head has not learnt either (too early to tell)."""
        if self.ctc_cer is None or self.diagonal_share >= UNALIGNED_DIAGONAL_SHARE:
            return ""
        if self.ctc_cer > CTC_LEARNT_RATIO * self.speller_cer:
            return ""
        return (
            f"attention has not aligned: {self.diagonal_share:.0%} of dev decoded along a diagonal, the speller "
            f"alone reads dev at {self.speller_cer:.1f}% where the CTC head reads {self.ctc_cer:.1f}%"
        )
