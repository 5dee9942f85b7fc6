"""Batched beam search: utterances x beams in one tensor batch per step."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.search.common import Hypothesis, Symbols, length_limits, step_log_probs
from las.search.ctc_prefix import CTCPrefixScorer


@dataclass(frozen=True)
class BeamSearch:
    """Keeps the `beam_size` best prefixes of each utterance; a prefix that ends among the best
    `beam_size` candidates of a step is final. An utterance is done with `beam_size` final
    hypotheses, or at its length limit. With `ctc_weight` λ each step scores
    (1 - λ) · attention + λ · CTC prefix increment (Watanabe et al. 2017)."""

    symbols: Symbols
    max_length_ratio: float
    min_length_ratio: float
    beam_size: int
    nbest: int
    length_penalty: float
    length_normalize: bool
    eos_threshold: float
    ctc_weight: float

    def rank(self, hypothesis: Hypothesis) -> float:
        """Ranking score of a final hypothesis: length-normalised and/or with a per-character bonus."""
        length = len(hypothesis.tokens)
        score = hypothesis.score / (length + 1) if self.length_normalize else hypothesis.score
        return score + self.length_penalty * length

    @torch.no_grad()
    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        batch, beams, eos = memory.values.shape[0], self.beam_size, self.symbols.eos
        device = memory.values.device
        memory = memory.select(torch.arange(batch, device=device).repeat_interleave(beams))  # (batch * beams, ...)
        rows = batch * beams
        offsets = torch.arange(batch, device=device)[:, None] * beams  # (batch, 1): first row of each utterance
        max_lengths = length_limits(memory, self.max_length_ratio)  # (rows,)
        min_lengths = (memory.lengths.float() * self.min_length_ratio).floor().long()
        state = model.speller.initial_state(memory)
        ctc = None
        if self.ctc_weight > 0:
            ctc = CTCPrefixScorer(
                model.ctc_head(memory.hidden).log_softmax(-1), memory.lengths, self.symbols.blank, eos
            )
            ctc_state = ctc.initial_state()
        tokens = torch.full((rows,), self.symbols.sos, dtype=torch.long, device=device)
        # All beams of an utterance start as the same empty prefix: keep one alive.
        scores = torch.full((batch, beams), float("-inf"), device=device)
        scores[:, 0] = 0.0
        history = torch.empty(rows, 0, dtype=torch.long, device=device)
        attention = torch.empty(rows, 0, memory.values.shape[1], device=device)
        finals: list[list[Hypothesis]] = [[] for _ in range(batch)]
        done = torch.zeros(batch, dtype=torch.bool, device=device)
        frames = memory.lengths.tolist()
        for step in range(int(max_lengths.max())):
            log_probs, state = step_log_probs(model, tokens, state, memory, self.symbols)  # (rows, vocabulary)
            attention = torch.cat([attention, state.weights[:, None, :]], dim=1)
            step_scores = log_probs
            if ctc is not None:
                increments, ctc_forward = ctc.score(ctc_state)
                step_scores = (1 - self.ctc_weight) * log_probs + self.ctc_weight * increments
            candidates = self.allowed(
                scores.reshape(rows, 1) + step_scores, log_probs, step + 1, min_lengths, max_lengths
            )
            vocabulary = candidates.shape[1]
            # The best 2 x beams candidates hold at least `beams` that continue (one <eos> per beam at most).
            top_scores, top_index = candidates.reshape(batch, beams * vocabulary).topk(2 * beams, dim=1)
            top_tokens = top_index % vocabulary
            top_origin = top_index // vocabulary + offsets  # (batch, 2 * beams) rows
            is_end = (top_tokens == eos) & torch.isfinite(top_scores)
            final = is_end & (torch.arange(2 * beams, device=device) < beams) & ~done[:, None]
            for utterance, position in final.nonzero().tolist():
                row = top_origin[utterance, position].item()
                length = history.shape[1]
                finals[utterance].append(
                    Hypothesis(
                        history[row].tolist(),
                        top_scores[utterance, position].item(),
                        attention[row, : length + 1, : frames[row]].cpu(),
                    )
                )
            # Continue with the best `beams` candidates that do not end.
            keep = (top_tokens == eos).long().argsort(dim=1, stable=True)[:, :beams]  # (batch, beams)
            scores = top_scores.gather(1, keep)
            origin = top_origin.gather(1, keep).reshape(rows)
            tokens = top_tokens.gather(1, keep).reshape(rows)
            state = state.select(origin)
            history = torch.cat([history[origin], tokens[:, None]], dim=1)
            attention = attention[origin]
            if ctc is not None:
                ctc_state = ctc.select(ctc_forward, increments, ctc_state, origin, tokens)
            done |= torch.tensor([len(hypotheses) >= beams for hypotheses in finals], device=device)
            done |= ~torch.isfinite(scores).any(dim=1)
            if done.all():
                break
        return [sorted(hypotheses, key=self.rank, reverse=True)[: self.nbest] for hypotheses in finals]

    def allowed(
        self,
        candidates: torch.Tensor,  # (rows, vocabulary) scores of every extension
        log_probs: torch.Tensor,  # (rows, vocabulary) the attention decoder's
        length: int,  # output symbols once extended, <eos> included
        min_lengths: torch.Tensor,  # (rows,)
        max_lengths: torch.Tensor,  # (rows,)
    ) -> torch.Tensor:
        """`candidates` with -inf where a rule forbids the extension: <eos> too early or too unlikely,
        anything but <eos> at the length limit (where <eos> is always allowed)."""
        eos = self.symbols.eos
        at_limit = length >= max_lengths  # (rows,)
        may_end = self.may_end(log_probs, length, min_lengths) | at_limit
        candidates[:, eos] = candidates[:, eos].masked_fill(~may_end, float("-inf"))
        not_eos = torch.arange(candidates.shape[1], device=candidates.device) != eos
        return candidates.masked_fill(at_limit[:, None] & not_eos[None, :], float("-inf"))

    def may_end(self, log_probs: torch.Tensor, length: int, min_lengths: torch.Tensor) -> torch.Tensor:
        """`(rows,)` whether <eos> may follow: long enough, and likely enough if thresholded."""
        allowed = length > min_lengths
        if self.eos_threshold > 0:
            others = log_probs.clone()
            others[:, self.symbols.eos] = float("-inf")
            allowed &= log_probs[:, self.symbols.eos] > self.eos_threshold * others.max(dim=1).values
        return allowed
