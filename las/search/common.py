"""What every decoding strategy shares: the hypothesis record, the interface, symbol rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.model.speller import SpellerState
from las.text import Vocabulary


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # character ids, without <sos> and <eos>
    score: float  # log-likelihood of tokens + <eos> under the model (joint with CTC if enabled)
    attention: torch.Tensor | None  # (tokens + 1, encoder_frames) weights per emitted symbol, CPU


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


def length_limits(memory: ListenerOutput, ratio: float) -> torch.Tensor:
    """Longest output (characters + <eos>) allowed per utterance: `(batch,)`."""
    return (memory.lengths.float() * ratio).ceil().long() + 5


def step_log_probs(
    model: LAS, tokens: torch.Tensor, state: SpellerState, memory: ListenerOutput, symbols: Symbols
) -> tuple[torch.Tensor, SpellerState]:
    """Next-symbol log-probabilities `(rows, vocabulary)` with forbidden symbols at -inf."""
    logits, state = model.speller.step(tokens, state, memory)
    log_probs = logits.float().log_softmax(dim=-1)
    log_probs[:, list(symbols.forbidden)] = float("-inf")
    return log_probs, state
