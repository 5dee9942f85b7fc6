"""Strategies that follow one path per row: greedy decoding and random search (sampling)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.search.common import Hypothesis, Rules, Symbols, step_log_probs


def follow_paths(
    model: LAS,
    memory: ListenerOutput,  # (paths, ...)
    symbols: Symbols,
    rules: Rules,
    choose: Callable[[torch.Tensor], torch.Tensor],  # log-probs (paths, vocabulary) -> tokens (paths,)
) -> list[Hypothesis]:
    """One hypothesis per row of `memory`, extended by `choose` until <eos> or the length limit."""
    rows = memory.values.shape[0]
    limits, min_lengths = rules.max_lengths(model, memory), rules.min_lengths(memory)
    state = model.speller.initial_state(memory)
    tokens = torch.full((rows,), symbols.sos, dtype=torch.long, device=memory.values.device)
    finished = torch.zeros(rows, dtype=torch.bool, device=tokens.device)
    scores = torch.zeros(rows, device=tokens.device)
    emitted, weights = [], []
    for step in range(int(limits.max())):
        log_probs, state = step_log_probs(model, tokens, state, memory, symbols, rules)
        allowed = log_probs.clone()  # what may be chosen: <eos> only where the rules let it come
        may_end = rules.may_end(log_probs, step + 1, min_lengths, symbols.eos)
        allowed[:, symbols.eos] = allowed[:, symbols.eos].masked_fill(~may_end, float("-inf"))
        tokens = torch.where(step + 1 >= limits, symbols.eos, choose(allowed))  # at the limit: end here
        scores += log_probs.gather(1, tokens[:, None]).squeeze(1).masked_fill(finished, 0.0)
        emitted.append(tokens)
        weights.append(state.weights)
        finished |= tokens == symbols.eos
        if finished.all():
            break
    emitted_ids = torch.stack(emitted, dim=1).tolist()  # (rows, steps)
    attention = torch.stack(weights, dim=1).float().cpu()  # (rows, steps, frames)
    hypotheses = []
    for row, (ids, score, length) in enumerate(zip(emitted_ids, scores.tolist(), memory.lengths.tolist(), strict=True)):
        end = ids.index(symbols.eos)
        hypotheses.append(Hypothesis(ids[:end], score, attention[row, : end + 1, :length]))
    return hypotheses


@dataclass(frozen=True)
class GreedySearch:
    """The most likely character at every step: fast, and what training reports dev CER with."""

    symbols: Symbols
    rules: Rules = Rules()

    @torch.no_grad()
    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        paths = follow_paths(model, memory, self.symbols, self.rules, lambda log_probs: log_probs.argmax(-1))
        return [[hypothesis] for hypothesis in paths]


@dataclass(frozen=True)
class SamplingSearch:
    """Random search (CMU 11-785 HW4): draw paths from the softmax at a temperature, keep the ones
    the model scores highest. The greedy path is always one of the candidates, so the result is
    never less likely under the model than greedy decoding."""

    symbols: Symbols
    rules: Rules
    samples: int
    temperature: float
    nbest: int
    seed: int

    @torch.no_grad()
    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        batch, samples = memory.values.shape[0], self.samples
        expanded = memory.select(torch.arange(batch, device=memory.values.device).repeat_interleave(samples))
        generator = torch.Generator(device=memory.values.device).manual_seed(self.seed)
        greedy_rows = torch.arange(batch * samples, device=memory.values.device) % samples == 0

        def choose(log_probs: torch.Tensor) -> torch.Tensor:
            drawn = torch.multinomial((log_probs / self.temperature).softmax(-1), 1, generator=generator).squeeze(1)
            return torch.where(greedy_rows, log_probs.argmax(-1), drawn)

        paths = follow_paths(model, expanded, self.symbols, self.rules, choose)
        results = []
        for utterance in range(batch):
            unique = {tuple(path.tokens): path for path in paths[utterance * samples : (utterance + 1) * samples]}
            ranked = sorted(unique.values(), key=self.rules.rank, reverse=True)
            results.append(ranked[: self.nbest])
        return results
