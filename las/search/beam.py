"""Batched beam search: utterances x beams in one tensor batch per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.search.common import Heard, Hypothesis, Limits, Rules, Symbols, steps_between_checks
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


@dataclass(frozen=True)
class BeamSearch:
    """Keeps the `beam_size` best prefixes of each utterance; a prefix that ends among the best
    `beam_size` candidates of a step is final. An utterance is done with `beam_size` final
    hypotheses, or at its length limit. Scores come from `scoring`: the speller, joined with
    the CTC prefix score (Watanabe et al. 2017) and a character LM when asked."""

    symbols: Symbols
    rules: Rules
    beam_size: int
    nbest: int
    scoring: Scoring = field(default_factory=Scoring)

    @torch.no_grad()
    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        beams, eos = self.beam_size, self.symbols.eos
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
        for step in range(int(rows.limits.longest.max())):
            batch = len(utterances)
            scored = scorer.score(rows.states, rows.tokens)
            trace.weights.append(scored.weights)
            candidates = self.rules.constrain(
                scores.reshape(-1, 1) + scored.total, scored.speller, step + 1, rows.limits, eos
            )
            vocabulary = candidates.shape[1]
            # The best 2 x beams candidates hold at least `beams` that continue (one <eos> per beam at most).
            top_scores, top_index = candidates.reshape(batch, beams * vocabulary).topk(2 * beams, dim=1)
            top_tokens = top_index % vocabulary
            top_origin = top_index // vocabulary + torch.arange(batch, device=device)[:, None] * beams  # rows
            ends = ((top_tokens == eos) & torch.isfinite(top_scores))[:, :beams]
            trace.ends.append(Ends(ends, top_origin[:, :beams], top_scores[:, :beams], utterances))
            ended.index_add_(0, utterances, ends.sum(dim=1))
            # Continue with the best `beams` candidates that do not end.
            keep = (top_tokens == eos).long().argsort(dim=1, stable=True)[:, :beams]  # (batch, beams)
            scores = top_scores.gather(1, keep)
            origin = top_origin.gather(1, keep).reshape(-1)
            tokens = top_tokens.gather(1, keep).reshape(-1)
            rows = rows._replace(states=scorer.advance(scored, origin, tokens), tokens=tokens)
            done = (ended[utterances] >= beams) | ~torch.isfinite(scores).any(dim=1)  # (batch,)
            # A done utterance searches on only until the next check, and ends nothing more.
            scores = scores.masked_fill(done[:, None], float("-inf"))
            if (step + 1) % check_every == 0:
                if done.all():
                    break
                if done.any():
                    live = (~done).nonzero().squeeze(1)
                    kept = (live[:, None] * beams + torch.arange(beams, device=device)).reshape(-1)
                    rows = rows.keep(scorer, kept)
                    scores, utterances, origin, tokens = scores[live], utterances[live], origin[kept], tokens[kept]
            trace.parents.append(origin)
            trace.tokens.append(tokens)
        finals = trace.hypotheses(memory.values.shape[0], memory.lengths)
        return [sorted(hypotheses, key=self.rules.rank, reverse=True)[: self.nbest] for hypotheses in finals]
