"""Strategies that follow one path per row: greedy decoding and random search (sampling)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

import torch

from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.search.common import Heard, Hypothesis, Limits, Rules, Symbols, steps_between_checks
from las.search.graphs import CapturedStep, cloned
from las.search.scorers import JointScorer, Scoring


class Followed(NamedTuple):
    """What one step leaves every path: its next state and symbol, and what the step decided."""

    states: tuple[Any, ...]  # per scorer
    tokens: torch.Tensor  # (paths,) the symbol each path added
    scores: torch.Tensor  # (paths,) log-likelihood so far
    finished: torch.Tensor  # (paths,) bool: <eos> reached
    weights: torch.Tensor  # (paths, frames) the attention of this step


def follow_paths(
    model: LAS,
    memory: ListenerOutput,  # (paths, ...)
    symbols: Symbols,
    rules: Rules,
    scoring: Scoring,
    choose: Callable[[torch.Tensor], torch.Tensor],  # scores (paths, vocabulary) -> tokens (paths,)
    cuda_graphs: bool = False,
    generators: Sequence[torch.Generator] = (),  # those `choose` draws from
) -> list[Hypothesis]:
    """One hypothesis per row of `memory`, extended by `choose` until <eos> or the length limit;
    with `cuda_graphs`, each step one CUDA graph (las.search.graphs)."""
    heard = Heard.of(model, memory)
    scorer = scoring.joint(model, symbols, rules)
    limits, states = rules.limits(heard), scorer.start(heard)
    rows = memory.values.shape[0]
    tokens = torch.full((rows,), symbols.sos, dtype=torch.long, device=memory.values.device)
    finished = torch.zeros(rows, dtype=torch.bool, device=tokens.device)
    scores = torch.zeros(rows, device=tokens.device)
    emitted, weights = [], []
    check_every, longest = steps_between_checks(tokens.device), int(limits.longest.max())
    step_of: Callable[..., Followed] = partial(path_step, scorer, rules, symbols.eos, choose)
    if cuda_graphs:
        step_of = CapturedStep(step_of, generators)
        lengths = torch.arange(1, longest + 1, device=tokens.device)  # what `step + 1` is inside the graph
    for step in range(longest):
        taken = step_of(states, tokens, scores, finished, limits, lengths[step] if cuda_graphs else step + 1)
        states, scores, finished = taken.states, taken.scores, taken.finished
        # Kept across steps: a graph's next replay overwrites its outputs.
        tokens, attention = cloned((taken.tokens, taken.weights)) if cuda_graphs else (taken.tokens, taken.weights)
        emitted.append(tokens)
        weights.append(attention)
        # A finished row only adds <eos> at no cost, so steps past the last row's end change nothing.
        if (step + 1) % check_every == 0 and finished.all():
            break
    emitted_ids = torch.stack(emitted, dim=1).tolist()  # (rows, steps)
    attention = torch.stack(weights, dim=1).float().cpu()  # (rows, steps, frames)
    hypotheses = []
    for row, (ids, score, length) in enumerate(zip(emitted_ids, scores.tolist(), memory.lengths.tolist(), strict=True)):
        end = ids.index(symbols.eos)
        hypotheses.append(Hypothesis(ids[:end], score, attention[row, : end + 1, :length]))
    return hypotheses


def path_step(
    scorer: JointScorer,
    rules: Rules,
    eos: int,
    choose: Callable[[torch.Tensor], torch.Tensor],
    states: tuple[Any, ...],
    tokens: torch.Tensor,  # (paths,) the last symbol of each
    scores: torch.Tensor,  # (paths,)
    finished: torch.Tensor,  # (paths,)
    limits: Limits,
    length: int | torch.Tensor,  # output symbols once extended, <eos> included (() on the device in a graph)
) -> Followed:
    """One step of every path, with nothing read on the host (las.search.graphs)."""
    scored = scorer.score(states, tokens)
    allowed = rules.constrain(scored.total, scored.speller, length, limits, eos)
    # A row that ended, or that no extension may follow (its CTC prefix is impossible), may only
    # end: its scores (NaN once its CTC prefix is impossible: -inf - -inf) are not drawn from.
    ending = finished | ~torch.isfinite(allowed).any(dim=1)
    allowed = allowed.masked_fill(ending[:, None], float("-inf"))
    allowed[:, eos] = allowed[:, eos].masked_fill(ending, 0.0)
    tokens = choose(allowed)
    scores = scores + scored.total.gather(1, tokens[:, None]).squeeze(1).masked_fill(finished, 0.0)
    states = scorer.advance(scored, torch.arange(len(tokens), device=tokens.device), tokens)
    return Followed(states, tokens, scores, finished | (tokens == eos), scored.weights)


@dataclass(frozen=True)
class GreedySearch:
    """The best-scoring symbol at every step: fast, and what training reports dev CER with."""

    symbols: Symbols
    rules: Rules = Rules()
    scoring: Scoring = field(default_factory=Scoring)
    cuda_graphs: bool = False  # each step one CUDA graph (las.search.graphs)

    @torch.no_grad()
    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        paths = follow_paths(
            model, memory, self.symbols, self.rules, self.scoring, lambda scores: scores.argmax(-1), self.cuda_graphs
        )
        return [[hypothesis] for hypothesis in paths]


@dataclass(frozen=True)
class SamplingSearch:
    """Random search (CMU 11-785 HW4): draw paths from the softmax of the scores at a
    temperature, keep the ones that score highest. The greedy path is always one of the
    candidates, so the result never scores lower than greedy decoding."""

    symbols: Symbols
    rules: Rules
    samples: int
    temperature: float
    nbest: int
    seed: int
    scoring: Scoring = field(default_factory=Scoring)
    cuda_graphs: bool = False  # each step one CUDA graph (las.search.graphs)

    @torch.no_grad()
    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        batch, samples = memory.values.shape[0], self.samples
        expanded = memory.select(torch.arange(batch, device=memory.values.device).repeat_interleave(samples))
        generator = torch.Generator(device=memory.values.device).manual_seed(self.seed)
        greedy_rows = torch.arange(batch * samples, device=memory.values.device) % samples == 0

        def choose(scores: torch.Tensor) -> torch.Tensor:
            # A draw from the softmax as torch.multinomial makes one (the same numbers from the same
            # generator): the largest probability over an exponential variate. multinomial itself
            # first checks its input on the host, which a CUDA graph cannot hold.
            probabilities = (scores / self.temperature).softmax(-1)
            drawn = (probabilities / torch.empty_like(probabilities).exponential_(generator=generator)).argmax(-1)
            return torch.where(greedy_rows, scores.argmax(-1), drawn)

        paths = follow_paths(
            model, expanded, self.symbols, self.rules, self.scoring, choose, self.cuda_graphs, [generator]
        )
        results = []
        for utterance in range(batch):
            unique = {tuple(path.tokens): path for path in paths[utterance * samples : (utterance + 1) * samples]}
            ranked = sorted(unique.values(), key=self.rules.rank, reverse=True)
            results.append(ranked[: self.nbest])
        return results
