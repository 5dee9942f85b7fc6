"""Long utterances cut into short pieces at the CTC head's alignment, for the attention's first
steps from scratch.

From scratch, the attention over a 13 s recording does not find its place (docs/archive/experiments.md,
"Long utterances from scratch"), where over AN4's 2.7 s utterances the same model's finds it in
300-400 steps; and a model that aligned on short utterances reads long ones after a few epochs
on them. So once the CTC head has learnt (a batch's CTC loss under a trigger, per character),
each utterance of a batch is cut into pieces of whole words at most `longest` frames long, at
the middle of the pauses between words on the head's forced alignment of the transcript, and
the step trains on the pieces; their longest doubles every so many steps, until no training
utterance is cut or up to the length decoding reads (`decode.segment_seconds`: a speller taught
whole 14 s recordings pulled the listener it shares with the CTC head away from what the head
had learnt). An utterance the head does not align well enough yet is heard whole by the head
alone, in a batch of its own, so that the head goes on learning from what it reads worst. Only
training cuts at the CTC alignment: the dev pass and decoding cut recordings longer than
`decode.segment_seconds` at their pauses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from las.core.text import PAD_INDEX, Vocabulary
from las.data.dataset import Batch, speller_targets
from las.model.ctc_path import Span, ctc_frames_needed, runs, viterbi_paths
from las.model.las import LAS


class Piece(NamedTuple):
    """Part of an utterance: input `frames` `[start, end)`, and its `tokens` `[first, last)`."""

    frames: Span
    tokens: Span


class Cutting(NamedTuple):
    """The pieces of one step: each at most `longest` input frames (drawn between half of it and
    all of it, piece by piece, so that cuts fall anywhere), from utterances whose CTC loss is
    under `trigger` nats a character."""

    longest: int
    trigger: float


def word_spans(tokens: Sequence[int], spans: Sequence[Span], space: int) -> list[tuple[Span, Span]]:
    """Each word's `[first, last)` tokens and `[start, end)` encoder frames, from each token's
    frames on a CTC alignment (`spans`, one per token)."""
    words: list[tuple[Span, Span]] = []
    first = 0
    for position in range(len(tokens) + 1):
        if position == len(tokens) or tokens[position] == space:
            if position > first:
                words.append(((first, position), (spans[first][0], spans[position - 1][1])))
            first = position + 1
    return words


def pause_middles(words: Sequence[tuple[Span, Span]], encoder_frames: int, input_frames: int) -> list[int]:
    """The input frame of each cut of an utterance of `input_frames` (`encoder_frames` after the
    listener): its start, the middle of each pause between two `words` (their tokens and encoder
    frames, in order), its end."""
    scale = input_frames / encoder_frames
    middles = [round(scale * (before[1][1] + after[1][0]) / 2) for before, after in zip(words, words[1:], strict=False)]
    return [0, *middles, input_frames]


def pieces_of(
    words: Sequence[tuple[Span, Span]],
    encoder_frames: int,
    input_frames: int,
    longests: Sequence[int],
) -> list[Piece]:
    """The utterance cut into pieces of whole words, each at most `longests[k]` input frames
    (the k-th piece's; a word longer than that is a piece alone), at the middle of the pause
    between two words. `words`: their tokens and encoder frames, in order; the recording's
    `encoder_frames` are `input_frames` of features."""
    if not words:
        return [Piece((0, input_frames), (0, 0))]
    cuts = pause_middles(words, encoder_frames, input_frames)
    pieces: list[Piece] = []
    first = 0
    while first < len(words):
        longest = longests[min(len(pieces), len(longests) - 1)]
        last = first + 1
        while last < len(words) and cuts[last + 1] - cuts[first] <= longest:
            last += 1
        pieces.append(Piece((cuts[first], cuts[last]), (words[first][0][0], words[last - 1][0][1])))
        first = last
    return pieces


class Utterance(NamedTuple):
    """An utterance or a piece of one, to batch: its `name`, `features` `(frames, mel_bins)` and
    `characters`."""

    name: str
    features: torch.Tensor
    characters: list[int]


class InPieces(NamedTuple):
    """A step's batch cut: its `pieces`, and its utterances `heard` whole by the CTC head alone
    (None: none), apart so that the pieces are not padded to their length; `divided`: whether
    any utterance was cut in two or more (where none was, the long ones are all heard, and the
    step says nothing of how the attention follows pieces)."""

    pieces: Batch
    heard: Batch | None
    divided: bool


def cut(
    model: LAS, batch: Batch, cutting: Cutting, vocabulary: Vocabulary, generator: torch.Generator
) -> InPieces | None:
    """`batch` with each utterance longer than a piece cut into pieces where the CTC head has
    learnt to align it, heard whole by the head alone where it has not yet, left out where no
    CTC path spells it (utterances no longer than a piece whole), or None where the batch is
    to train as it is: every utterance fits, or each longer one is spelt by one piece."""
    if model.ctc_head is None or " " not in vocabulary.index:
        return None
    lengths = batch.feature_lengths.tolist()
    if max(lengths) <= cutting.longest:
        return None
    with torch.no_grad():  # where the head puts each character, not a step of training
        memory = model.listener(batch.features, batch.feature_lengths)
        log_probs = model.ctc_head(memory.hidden).log_softmax(dim=-1).float()  # (batch, frames, vocabulary)
        characters = batch.targets_in[:, 1:]
        counts = batch.target_lengths - 1
        losses = F.ctc_loss(
            log_probs.transpose(0, 1), characters, memory.lengths, counts, blank=PAD_INDEX, reduction="none"
        )
        per_character = (losses / counts.clamp_min(1)).tolist()
    encoder_lengths = memory.lengths.tolist()
    space = vocabulary.index[" "]
    row_tokens = [characters[row, : int(counts[row])].tolist() for row in range(len(lengths))]
    # Each utterance longer than a piece that a CTC path can spell: cut where the head aligns it
    # well enough; where it does not yet, heard whole by the head alone (too long for the
    # attention to learn from, with no alignment to cut it at), so that the head keeps learning
    # from the utterances it reads worst rather than only from those it already reads. Their
    # characters count in the attention loss's denominator too: while many are heard whole, the
    # step leans on CTC, as a joint weight heavy at first would.
    spellable = [
        row
        for row, frames in enumerate(lengths)
        if frames > cutting.longest and row_tokens[row] and encoder_lengths[row] >= ctc_frames_needed(row_tokens[row])
    ]
    alignable = [row for row in spellable if per_character[row] < cutting.trigger]  # inf where no path fits
    frames_of, tokens_of = [encoder_lengths[row] for row in alignable], [row_tokens[row] for row in alignable]
    paths = dict(zip(alignable, viterbi_paths(log_probs[alignable], frames_of, tokens_of, PAD_INDEX), strict=True))
    pieces: list[Utterance] = []
    heard: list[Utterance] = []
    divided = False  # whether any utterance was cut in two or more
    for row, (frames, encoder_frames) in enumerate(zip(lengths, encoder_lengths, strict=True)):
        whole = Utterance(batch.ids[row], batch.features[row, :frames], row_tokens[row])
        if frames <= cutting.longest:
            pieces.append(whole)
        elif row in paths:
            words = word_spans(row_tokens[row], runs(paths[row], PAD_INDEX), space)
            draws = torch.rand(math.ceil(2 * frames / cutting.longest) + 1, generator=generator)
            longests = [round(cutting.longest * (0.5 + 0.5 * draw)) for draw in draws.tolist()]
            # The mean over bins of normalised log-mel follows the frame's loudness.
            parts = pieces_of(words, encoder_frames, frames, longests)
            divided |= len(parts) > 1
            for number, ((start, end), (first, last)) in enumerate(parts):
                name = batch.ids[row] if len(parts) == 1 else f"{batch.ids[row]}#{number + 1}"
                pieces.append(Utterance(name, batch.features[row, start:end], row_tokens[row][first:last]))
        elif row in spellable:
            heard.append(whole)
    # Where no utterance is aligned well enough to cut, its long ones are still the head's alone:
    # a speller trained on whole recordings it cannot attend to learns to spell without reading
    # them, and pulls the listener it shares with the head from what the head has learnt.
    if not divided and not heard:
        return None  # the step trains on the batch as it is
    device = batch.features.device
    heard_batch = batched(heard, vocabulary, device, spelt=False) if heard else None
    if not pieces:  # every utterance heard whole: the step is the head's alone
        return InPieces(heard_batch, None, divided)
    return InPieces(batched(pieces, vocabulary, device), heard_batch, divided)


def batched(
    utterances: Sequence[Utterance],
    vocabulary: Vocabulary,
    device: torch.device,
    spelt: bool = True,
) -> Batch:
    """A batch of `utterances`; not `spelt`: for the CTC head alone, with no target for the
    speller, which reads one step of it."""
    tokens = [torch.tensor(utterance.characters, dtype=torch.long) for utterance in utterances]
    targets_in, targets_out, target_lengths = speller_targets(tokens, vocabulary)
    batch = Batch(
        ids=[utterance.name for utterance in utterances],
        features=pad_sequence([utterance.features for utterance in utterances], batch_first=True),
        feature_lengths=torch.tensor([len(utterance.features) for utterance in utterances]),
        targets_in=targets_in.to(device),
        targets_out=targets_out.to(device),
        target_lengths=target_lengths.to(device),
        texts=[None] * len(utterances),
    )
    return batch if spelt else batch.unspelt()
