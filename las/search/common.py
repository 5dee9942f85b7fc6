"""What every decoding strategy shares: the hypothesis record, the interface, symbol rules."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, NamedTuple, Protocol

import torch

from las.core.text import PAD_INDEX, Vocabulary
from las.model.las import LAS
from las.model.listener import ListenerOutput


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # character ids, without <sos> and <eos>
    score: float  # log-likelihood of tokens + <eos> under the model (joint with CTC if enabled)
    attention: torch.Tensor | None  # (tokens + 1, encoder_frames) weights per emitted symbol, CPU
    # [start, end) encoder frames of each token, when aligned (las.recognition.timing), and by what: ctc|attention
    spans: list[tuple[int, int]] | None = None
    aligned_by: str = ""
    confidences: list[float] | None = None  # of each token, when measured (las.recognition.confidence)


class Heard(NamedTuple):
    """What the listener made of a batch, per row: its memory and, with a CTC head, the head's
    log-probabilities `(rows, frames, vocabulary)`, computed once for every scorer and rule."""

    memory: ListenerOutput
    ctc_log_probs: torch.Tensor | None

    @classmethod
    def of(cls, model: LAS, memory: ListenerOutput) -> Heard:
        ctc = model.ctc_head(memory.hidden).float().log_softmax(-1) if model.ctc_head is not None else None
        return cls(memory, ctc)

    def select(self, rows: torch.Tensor) -> Heard:
        return Heard(self.memory.select(rows), self.ctc_log_probs[rows] if self.ctc_log_probs is not None else None)


class Limits(NamedTuple):
    longest: torch.Tensor  # (rows,) most output symbols, <eos> included
    shortest: torch.Tensor  # (rows,) fewest characters before <eos>

    def select(self, rows: torch.Tensor) -> Limits:
        return Limits(self.longest[rows], self.shortest[rows])


class Strategy(Protocol):
    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        """Per utterance, hypotheses best first."""
        ...


@dataclass(frozen=True)
class Symbols:
    sos: int
    eos: int
    blank: int  # the CTC blank, which is <pad>
    forbidden: tuple[int, ...]  # never emitted: <pad>, <sos>

    @classmethod
    def of(cls, vocabulary: Vocabulary) -> Symbols:
        return cls(vocabulary.sos, vocabulary.eos, vocabulary.pad, (vocabulary.pad, vocabulary.sos))


def reads_are_free(device: torch.device) -> bool:
    """Whether a decoding loop may read its tensors on `device` from the host at no cost. On a
    CPU it may. On an accelerator a read waits until every step launched so far has run, so the
    host cannot launch the next steps while the device runs these."""
    return device.type == "cpu"


def steps_between_checks(device: torch.device) -> int:
    """How many steps a decoding loop runs between asking whether its rows are done: every step
    where reads are free (a step more costs a step), else a few (a few steps more than needed
    cost less than waiting for the device every step)."""
    return 1 if reads_are_free(device) else STEPS_BETWEEN_CHECKS


STEPS_BETWEEN_CHECKS = 8

# How far behind its last peak a windowed attention may look: a step back for a repeated sound.
WINDOW_BACK_FRAMES = 2


@dataclass(frozen=True)
class Rules:
    """What every strategy obeys — greedy, random search, beam search and training's dev pass —
    so that an option means the same whichever strategy runs: where hypotheses must end, when
    <eos> may come, where the attention may look, and how finished hypotheses are ranked."""

    # Hypotheses end by this many characters (+ <eos>) per encoder frame, plus 5 ...
    max_length_ratio: float = 1.5
    # ... and, with a CTC head, by this many times the length of its greedy transcript, plus 5
    # (0: no such limit). The CTC head says how much speech there is: attention that loops or
    # wanders on noise cannot run on past it.
    ctc_length_ratio: float = 1.5
    min_length_ratio: float = 0.0  # <eos> not before this many characters per encoder frame
    eos_threshold: float = 0.0  # <eos> only where log p(eos) > this * max log p(other); 0: off
    # Attention only from WINDOW_BACK_FRAMES frames behind its last peak to this many ahead (0: off).
    attention_window: int = 0
    length_normalize: bool = True  # rank by score / (characters + 1)
    length_penalty: float = 0.0  # plus this per character

    @classmethod
    def of(cls, config: Any) -> Rules:
        """The rules set by a `DecodeConfig`."""
        return cls(**{item.name: getattr(config, item.name) for item in fields(cls)})

    def limits(self, heard: Heard) -> Limits:
        """How long each row's output may and must be."""
        limits = (heard.memory.lengths.float() * self.max_length_ratio).ceil().long() + 5
        if self.ctc_length_ratio > 0 and heard.ctc_log_probs is not None:
            characters = ctc_greedy_lengths(heard.ctc_log_probs, heard.memory.mask)
            limits = torch.minimum(limits, (characters.float() * self.ctc_length_ratio).ceil().long() + 5)
        return Limits(limits, (heard.memory.lengths.float() * self.min_length_ratio).floor().long())

    def constrain(
        self, scores: torch.Tensor, speller: torch.Tensor, length: int, limits: Limits, eos: int
    ) -> torch.Tensor:
        """`scores` `(rows, vocabulary)` with -inf where a rule forbids the extension: <eos> too
        early, or less likely under the `speller` log-probabilities than the threshold asks;
        anything but <eos> at the length limit, where <eos> always may come. `length` counts the
        output symbols once extended, <eos> included."""
        at_limit = length >= limits.longest  # (rows,)
        allowed = (length > limits.shortest) | at_limit
        if self.eos_threshold > 0:
            others = speller.clone()
            others[:, eos] = float("-inf")
            allowed &= (speller[:, eos] > self.eos_threshold * others.max(dim=1).values) | at_limit
        is_eos = torch.arange(scores.shape[1], device=scores.device) == eos
        # One new tensor per step (the decoders' hot loop): at the limit all but <eos> go, and
        # <eos> goes where it may not come.
        forbidden = torch.where(is_eos[None, :], ~allowed[:, None], at_limit[:, None])
        return scores.masked_fill(forbidden, float("-inf"))

    def rank(self, hypothesis: Hypothesis) -> float:
        """Ranking score of a final hypothesis: length-normalised and/or with a per-character bonus."""
        length = len(hypothesis.tokens)
        score = hypothesis.score / (length + 1) if self.length_normalize else hypothesis.score
        return score + self.length_penalty * length

    def attend(self, memory: ListenerOutput, weights: torch.Tensor) -> ListenerOutput:
        """`memory` whose mask also hides frames outside the window around the peak of `weights`
        `(rows, frames)`, the previous step's attention. The peak is a valid frame, so every row
        keeps one at least."""
        if self.attention_window <= 0:
            return memory
        peaks = weights.argmax(dim=1, keepdim=True)  # (rows, 1)
        frames = torch.arange(weights.shape[1], device=weights.device)[None, :]
        inside = (frames >= peaks - WINDOW_BACK_FRAMES) & (frames <= peaks + self.attention_window)
        return memory._replace(mask=memory.mask & inside)


def ctc_greedy_lengths(ctc_scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Characters in the greedy transcript of CTC logits or log-probabilities `(batch, frames,
    vocabulary)` over the valid frames of `mask` `(batch, frames)`: `(batch,)`."""
    best = ctc_scores.argmax(dim=-1)  # (batch, frames)
    previous = torch.nn.functional.pad(best, (1, 0), value=-1)[:, :-1]
    emitted = (best != PAD_INDEX) & (best != previous) & mask  # blank is <pad>
    return emitted.sum(dim=1)
