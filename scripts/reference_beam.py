"""A plain beam search, one utterance and one hypothesis at a time: the reference that the batched
`las.search.BeamSearch` must agree with (tests) and is measured against (benchmark). Not used by
the CLI. It follows the same rules, written as directly as possible."""

from __future__ import annotations

import math

import torch

from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.search import BeamSearch, Hypothesis
from las.search.common import step_log_probs
from las.search.ctc_prefix import CTCPrefixScorer


@torch.no_grad()
def reference_beam_search(model: LAS, memory: ListenerOutput, search: BeamSearch) -> list[Hypothesis]:
    """n-best of one utterance (`memory` of batch size 1)."""
    symbols, beams = search.symbols, search.beam_size
    rules = search.rules
    max_length = int(rules.max_lengths(model, memory)[0])
    min_length = int(rules.min_lengths(memory)[0])
    frames = memory.lengths[0].item()
    ctc = None
    if search.ctc_weight > 0:
        ctc = CTCPrefixScorer.from_log_probs(
            model.ctc_head(memory.hidden).log_softmax(-1), memory.lengths, symbols.blank, symbols.eos
        )
    # A hypothesis: (score, tokens, speller state, attention rows, CTC state)
    alive = [(0.0, [], model.speller.initial_state(memory), [], ctc.initial_state() if ctc else None)]
    finals: list[Hypothesis] = []
    for step in range(max_length):
        candidates = []
        for score, tokens, state, weights, ctc_state in alive:
            previous = torch.tensor([tokens[-1] if tokens else symbols.sos])
            log_probs, new_state = step_log_probs(model, previous, state, memory, symbols, rules)
            step_scores, ctc_forward, increments = log_probs, None, None
            if ctc is not None:
                increments, ctc_forward = ctc.score(ctc_state)
                step_scores = (1 - search.ctc_weight) * log_probs + search.ctc_weight * increments
            at_limit = step + 1 >= max_length
            may_end = at_limit or rules.may_end(log_probs, step + 1, torch.tensor([min_length]), symbols.eos)[0].item()
            for token in range(step_scores.shape[1]):
                total = score + step_scores[0, token].item()
                if (token == symbols.eos and not may_end) or (at_limit and token != symbols.eos):
                    total = float("-inf")
                if math.isfinite(total):
                    extension = (new_state, weights + [new_state.weights[0]], ctc_forward, increments, ctc_state)
                    candidates.append((total, tokens, token, extension))
        candidates.sort(key=lambda candidate: candidate[0], reverse=True)
        best = candidates[: 2 * beams]
        for position, (total, tokens, token, (_, weights, _, _, _)) in enumerate(best):
            if token == symbols.eos and position < beams:
                finals.append(Hypothesis(list(tokens), total, torch.stack(weights)[:, :frames]))
        alive = []
        for total, tokens, token, (state, weights, ctc_forward, increments, ctc_state) in best:
            if token != symbols.eos and len(alive) < beams:
                if ctc is not None:
                    origin, chosen = torch.tensor([0]), torch.tensor([token])
                    ctc_state = CTCPrefixScorer.select_extensions(ctc_forward, increments, ctc_state, origin, chosen)
                alive.append((total, tokens + [token], state, weights, ctc_state))
        if len(finals) >= beams or not alive:
            break
    return sorted(finals, key=rules.rank, reverse=True)[: search.nbest]
