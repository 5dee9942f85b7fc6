"""Decoding strategies behind one interface: each turns listener memory into n-best hypotheses.

The main loop that drives a strategy (training's dev pass, `las decode`) never knows which one
runs. Every strategy works on a whole batch of utterances at once, on CPU and CUDA alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from las.model.las import LAS
from las.model.listener import ListenerOutput


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # character ids, without <sos> and <eos>
    score: float  # log-likelihood of tokens + <eos> under the model
    attention: torch.Tensor  # (steps, encoder_frames) weights of each emitted symbol, on the CPU


class Strategy(Protocol):
    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        """Per utterance, hypotheses best first (one for greedy)."""
        ...


def maximum_lengths(memory: ListenerOutput, ratio: float) -> torch.Tensor:
    """Longest output (characters + <eos>) allowed per utterance: `(batch,)`."""
    return (memory.lengths.float() * ratio).ceil().long() + 5


@dataclass(frozen=True)
class GreedySearch:
    """The most likely character at every step: fast, and what training reports dev CER with."""

    sos: int
    eos: int
    max_length_ratio: float

    @torch.no_grad()
    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        speller = model.speller
        batch = memory.values.shape[0]
        limits = maximum_lengths(memory, self.max_length_ratio)  # (batch,), on the memory's device
        state = speller.initial_state(memory)
        tokens = torch.full((batch,), self.sos, dtype=torch.long, device=memory.values.device)
        finished = torch.zeros(batch, dtype=torch.bool, device=tokens.device)
        scores = torch.zeros(batch, device=tokens.device)
        emitted, weights = [], []
        for step in range(int(limits.max())):
            logits, state = speller.step(tokens, state, memory)
            log_probs = logits.float().log_softmax(dim=-1)  # (batch, vocabulary)
            # An utterance at its length limit is made to end here.
            tokens = torch.where(step + 1 >= limits, self.eos, log_probs.argmax(dim=-1))
            chosen = log_probs.gather(1, tokens[:, None]).squeeze(1)
            scores += chosen.masked_fill(finished, 0.0)
            emitted.append(tokens)
            weights.append(state.weights)
            finished |= tokens == self.eos
            if finished.all():
                break
        emitted_ids = torch.stack(emitted, dim=1).tolist()  # (batch, steps)
        attention = torch.stack(weights, dim=1).float().cpu()  # (batch, steps, frames)
        hypotheses = []
        for row, ids in enumerate(emitted_ids):
            length = ids.index(self.eos)
            hypotheses.append(
                [Hypothesis(ids[:length], scores[row].item(), attention[row, : length + 1, : memory.lengths[row]])]
            )
        return hypotheses
