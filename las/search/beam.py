"""Batched beam search: utterances x beams in one tensor batch per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.search.common import Heard, Hypothesis, Limits, Rules, Symbols
from las.search.scorers import JointScorer, Scoring


class Rows(NamedTuple):
    """Everything kept per row — one beam of one utterance, `beam_size` rows per utterance."""

    states: tuple[Any, ...]  # per scorer (JointScorer)
    tokens: torch.Tensor  # (rows,) the last symbol of each prefix
    history: torch.Tensor  # (rows, steps) the prefix
    limits: Limits
    frames: torch.Tensor  # (rows,) encoder frames

    def keep(self, scorer: JointScorer, rows: torch.Tensor) -> Rows:
        """Only `rows`: the beams of utterances still searching, so that finished ones cost nothing."""
        return Rows(
            scorer.keep(self.states, rows),
            self.tokens[rows],
            self.history[rows],
            self.limits.select(rows),
            self.frames[rows],
        )


class Trace:
    """Every step's attention weights per row, and the row each row came from, so that a finished
    hypothesis follows its rows back (rather than each row carrying its whole history along,
    reordered every step at a cost of steps x frames)."""

    def __init__(self) -> None:
        self.weights: list[torch.Tensor] = []  # per step (rows then, frames)
        self.parents: list[list[int]] = []  # per step after the first: each row's row at the step before

    def attention(self, row: int, frames: int) -> torch.Tensor:
        """`(steps, frames)` weights behind every symbol of the prefix in `row` at the last step."""
        path = [row]
        for parents in reversed(self.parents):
            path.append(parents[path[-1]])
        return torch.stack([weights[row, :frames] for weights, row in zip(self.weights, path[::-1], strict=True)]).cpu()


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
            history=torch.empty(len(heard.memory.lengths), 0, dtype=torch.long, device=device),
            limits=self.rules.limits(heard),
            frames=heard.memory.lengths,
        )
        # All beams of an utterance start as the same empty prefix: keep one alive.
        scores = torch.full((len(utterances), beams), float("-inf"), device=device)
        scores[:, 0] = 0.0
        finals: list[list[Hypothesis]] = [[] for _ in range(len(utterances))]
        trace = Trace()
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
            ends = (top_tokens == eos) & torch.isfinite(top_scores)
            original = utterances.tolist()
            for utterance, position in ends[:, :beams].nonzero().tolist():
                row = top_origin[utterance, position].item()
                finals[original[utterance]].append(
                    Hypothesis(
                        rows.history[row].tolist(),
                        top_scores[utterance, position].item(),
                        trace.attention(row, int(rows.frames[row])),
                    )
                )
            # Continue with the best `beams` candidates that do not end.
            keep = (top_tokens == eos).long().argsort(dim=1, stable=True)[:, :beams]  # (batch, beams)
            scores = top_scores.gather(1, keep)
            origin = top_origin.gather(1, keep).reshape(-1)
            tokens = top_tokens.gather(1, keep).reshape(-1)
            rows = rows._replace(
                states=scorer.advance(scored, origin, tokens),
                tokens=tokens,
                history=torch.cat([rows.history[origin], tokens[:, None]], dim=1),
            )
            done = torch.tensor([len(finals[index]) >= beams for index in original], device=device)
            done |= ~torch.isfinite(scores).any(dim=1)
            if done.all():
                break
            if done.any():
                live = (~done).nonzero().squeeze(1)
                kept = (live[:, None] * beams + torch.arange(beams, device=device)).reshape(-1)
                rows = rows.keep(scorer, kept)
                scores, utterances, origin = scores[live], utterances[live], origin[kept]
            trace.parents.append(origin.tolist())
        return [sorted(hypotheses, key=self.rules.rank, reverse=True)[: self.nbest] for hypotheses in finals]
