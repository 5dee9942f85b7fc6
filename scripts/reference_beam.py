"""A plain beam search, one utterance and one hypothesis at a time: the reference that the batched
`las.search.BeamSearch` must agree with (tests) and is measured against (benchmark). Not used by
the CLI. It asks the same scorers under the same rules, and keeps only its own plain loop."""

from __future__ import annotations

import math

import torch

from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.search import BeamSearch, Hypothesis
from las.search.common import Heard


@torch.no_grad()
def reference_beam_search(model: LAS, memory: ListenerOutput, search: BeamSearch) -> list[Hypothesis]:
    """n-best of one utterance (`memory` of batch size 1)."""
    symbols, beams, rules = search.symbols, search.beam_size, search.rules
    scorer = search.scoring.joint(model, symbols, rules)
    heard = Heard.of(model, memory)
    limits = rules.limits(heard)
    frames = int(memory.lengths[0])
    one = torch.zeros(1, dtype=torch.long)
    # A hypothesis: (score, tokens, scorer states, attention rows)
    alive = [(0.0, [], scorer.start(heard), [])]
    finals: list[Hypothesis] = []
    for step in range(int(limits.longest[0])):
        candidates = []
        for score, tokens, states, weights in alive:
            scored = scorer.score(states, torch.tensor([tokens[-1] if tokens else symbols.sos]))
            allowed = rules.constrain(scored.total, scored.speller, step + 1, limits, symbols.eos)[0]
            for token, step_score in enumerate(allowed.tolist()):
                if math.isfinite(score + step_score):
                    candidates.append((score + step_score, tokens, token, scored, weights + [scored.weights[0]]))
        candidates.sort(key=lambda candidate: candidate[0], reverse=True)
        best = candidates[: 2 * beams]
        for position, (total, tokens, token, _, weights) in enumerate(best):
            if token == symbols.eos and position < beams:
                finals.append(Hypothesis(list(tokens), total, torch.stack(weights)[:, :frames]))
        alive = [
            (total, tokens + [token], scorer.advance(scored, one, torch.tensor([token])), weights)
            for total, tokens, token, scored, weights in best
            if token != symbols.eos
        ][:beams]
        if len(finals) >= beams or not alive:
            break
    return sorted(finals, key=rules.rank, reverse=True)[: search.nbest]
