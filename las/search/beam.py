"""Batched beam search: utterances x beams in one tensor batch per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

import torch

from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.search.common import Heard, Hypothesis, Limits, Rules, Symbols, steps_between_checks
from las.search.graphs import CapturedStep, cloned
from las.search.scorers import JointScorer, Scoring


class Rows(NamedTuple):
    """Everything kept per row — one beam of one utterance, `beam_size` rows per utterance."""

    states: tuple[Any, ...]  # per scorer (JointScorer)
    tokens: torch.Tensor  # (rows,) the last symbol of each prefix
    limits: Limits

    def keep(self, scorer: JointScorer, rows: torch.Tensor) -> Rows:
        """Only `rows`: the beams of utterances still searching, so that finished ones cost nothing."""
        return Rows(
            scorer.keep(self.states, rows),
            self.tokens[rows],
            self.limits.select(rows),
        )


class Trace:
    """What every step decided, kept on the device until the search ends: each row's attention
    weights, the row it came from and the symbol it added, and which candidates ended there. A
    finished hypothesis follows its rows back through these (rather than each row carrying its
    whole history along, reordered every step at a cost of steps x frames), and nothing of it
    is read on the host while the search runs."""

    def __init__(self) -> None:
        self.weights: list[torch.Tensor] = []  # per step: (rows then, frames)
        self.parents: list[torch.Tensor] = []  # per step after the first: (rows,) each row's row at the step before
        self.tokens: list[torch.Tensor] = []  # per step after the first: (rows,) the symbol it added then
        self.ends: list[Ends] = []  # per step

    def hypotheses(self, utterances: int, frames: torch.Tensor) -> list[list[Hypothesis]]:
        """Per utterance, its finished hypotheses in the order they ended; `frames` `(utterances,)`."""
        parents = [step.tolist() for step in self.parents]
        tokens = [step.tolist() for step in self.tokens]
        lengths = frames.tolist()
        finals: list[list[Hypothesis]] = [[] for _ in range(utterances)]
        for step, ends in enumerate(self.ends):
            positions = ends.ended.nonzero().tolist()
            if not positions:
                continue
            original, rows, scores = ends.utterances.tolist(), ends.rows.tolist(), ends.scores.tolist()
            for utterance, position in positions:
                path, history = [rows[utterance][position]], []
                for back in range(step - 1, -1, -1):
                    history.append(tokens[back][path[-1]])
                    path.append(parents[back][path[-1]])
                path.reverse()
                index = original[utterance]
                attention = torch.stack([self.weights[at][row, : lengths[index]] for at, row in enumerate(path)])
                finals[index].append(Hypothesis(history[::-1], scores[utterance][position], attention.cpu()))
        return finals


class Ends(NamedTuple):
    """The candidates of one step that ended among the best `beam_size` of their utterance."""

    ended: torch.Tensor  # (utterances then, beams) bool
    rows: torch.Tensor  # (utterances then, beams) the row each candidate extends
    scores: torch.Tensor  # (utterances then, beams)
    utterances: torch.Tensor  # (utterances then,) original index of each


class Stepped(NamedTuple):
    """What one step of the beam search leaves: the rows to go on with, and what it decided."""

    states: tuple[Any, ...]  # per scorer, of the rows kept
    tokens: torch.Tensor  # (rows,) the symbol each kept row added
    origin: torch.Tensor  # (rows,) the row each kept row extends
    scores: torch.Tensor  # (utterances, beams) of the kept rows; -inf for a done utterance's
    ended: torch.Tensor  # (all utterances,) finished hypotheses of each so far
    done: torch.Tensor  # (utterances,) bool: no more to search
    weights: torch.Tensor  # (rows, frames) the attention of this step
    ends: Ends


@dataclass(frozen=True)
class BeamSearch:
    """Keeps the `beam_size` best prefixes of each utterance; a prefix that ends among the best
    `beam_size` candidates of a step is final. An utterance is done with `beam_size` final
    hypotheses, or at its length limit. Scores come from `scoring`: the speller, joined with
    the CTC prefix score (Watanabe et al. 2017) and a character LM when asked. With
    `cuda_graphs`, each step is one CUDA graph (las.search.graphs), and done utterances keep
    their rows (a graph's shapes are fixed) rather than leaving the batch."""

    symbols: Symbols
    rules: Rules
    beam_size: int
    nbest: int
    scoring: Scoring = field(default_factory=Scoring)
    cuda_graphs: bool = False

    @torch.no_grad()
    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        beams = self.beam_size
        device = memory.values.device
        utterances = torch.arange(memory.values.shape[0], device=device)  # original index of each live utterance
        scorer = self.scoring.joint(model, self.symbols, self.rules)
        # Every row of an utterance hears the same: the CTC head runs once per utterance.
        heard = Heard.of(model, memory).select(utterances.repeat_interleave(beams))
        rows = Rows(
            states=scorer.start(heard),
            tokens=torch.full((len(heard.memory.lengths),), self.symbols.sos, dtype=torch.long, device=device),
            limits=self.rules.limits(heard),
        )
        # All beams of an utterance start as the same empty prefix: keep one alive.
        scores = torch.full((len(utterances), beams), float("-inf"), device=device)
        scores[:, 0] = 0.0
        ended = torch.zeros(len(utterances), dtype=torch.long, device=device)  # finished hypotheses per utterance
        trace, check_every = Trace(), steps_between_checks(device)
        longest = int(rows.limits.longest.max())
        step_of = partial(self.step, scorer)
        if self.cuda_graphs:
            step_of = CapturedStep(step_of)
            lengths = torch.arange(1, longest + 1, device=device)  # what `step + 1` is inside the graph
        for step in range(longest):
            length = lengths[step] if self.cuda_graphs else step + 1
            taken = step_of(rows, scores, ended, utterances, length)
            weights, ends, origin, tokens = taken.weights, taken.ends, taken.origin, taken.tokens
            if self.cuda_graphs:  # the next replay overwrites the graph's outputs; these are kept
                weights, ends, origin, tokens = cloned((weights, ends, origin, tokens))
            trace.weights.append(weights)
            trace.ends.append(ends)
            scores, ended = taken.scores, taken.ended
            rows = rows._replace(states=taken.states, tokens=taken.tokens)
            if (step + 1) % check_every == 0:
                if taken.done.all():
                    break
                if taken.done.any() and not self.cuda_graphs:
                    live = (~taken.done).nonzero().squeeze(1)
                    kept = (live[:, None] * beams + torch.arange(beams, device=device)).reshape(-1)
                    rows = rows.keep(scorer, kept)
                    scores, utterances, origin, tokens = scores[live], utterances[live], origin[kept], tokens[kept]
            trace.parents.append(origin)
            trace.tokens.append(tokens)
        finals = trace.hypotheses(memory.values.shape[0], memory.lengths)
        return [sorted(hypotheses, key=self.rules.rank, reverse=True)[: self.nbest] for hypotheses in finals]

    def step(
        self,
        scorer: JointScorer,
        rows: Rows,
        scores: torch.Tensor,  # (utterances, beams)
        ended: torch.Tensor,  # (all utterances,)
        utterances: torch.Tensor,  # (utterances,) original index of each
        length: int | torch.Tensor,  # output symbols once extended, <eos> included (() on the device in a graph)
    ) -> Stepped:
        """One step for every row, with nothing read on the host (las.search.graphs)."""
        beams, eos = self.beam_size, self.symbols.eos
        batch = scores.shape[0]
        scored = scorer.score(rows.states, rows.tokens)
        # A row of score -inf holds no prefix (fewer live candidates than beams: a beam wider than
        # the vocabulary) and stays so: its scorers' increments are meaningless, +inf among them,
        # and -inf + inf is a NaN, which topk ranks above every score.
        alive = torch.isfinite(scores).reshape(-1, 1)
        total = torch.where(alive, scores.reshape(-1, 1) + scored.total, float("-inf"))
        candidates = self.rules.constrain(total, scored.speller, length, rows.limits, eos)
        # A row that no extension may follow (its CTC prefix cannot go on, and a lexicon lets no
        # word end here) may only end, as it is: as in greedy and random search (paths.path_step).
        stuck = ~torch.isfinite(candidates).any(dim=1)
        candidates[:, eos] = torch.where(stuck, scores.reshape(-1), candidates[:, eos])
        vocabulary = candidates.shape[1]
        # The best 2 x beams candidates hold at least `beams` that continue (one <eos> per beam at most).
        top_scores, top_index = candidates.reshape(batch, beams * vocabulary).topk(2 * beams, dim=1)
        top_tokens = top_index % vocabulary
        top_origin = top_index // vocabulary + torch.arange(batch, device=scores.device)[:, None] * beams  # rows
        finishing = ((top_tokens == eos) & torch.isfinite(top_scores))[:, :beams]
        ends = Ends(finishing, top_origin[:, :beams], top_scores[:, :beams], utterances)
        ended = ended.index_add(0, utterances, finishing.sum(dim=1))
        # Continue with the best `beams` candidates that do not end.
        keep = (top_tokens == eos).long().argsort(dim=1, stable=True)[:, :beams]  # (batch, beams)
        scores = top_scores.gather(1, keep)
        origin = top_origin.gather(1, keep).reshape(-1)
        tokens = top_tokens.gather(1, keep).reshape(-1)
        done = (ended[utterances] >= beams) | ~torch.isfinite(scores).any(dim=1)  # (batch,)
        # A done utterance searches on only until the next check, and ends nothing more.
        scores = scores.masked_fill(done[:, None], float("-inf"))
        states = scorer.advance(scored, origin, tokens)
        return Stepped(states, tokens, origin, scores, ended, done, scored.weights, ends)
