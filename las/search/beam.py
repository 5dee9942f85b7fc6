"""Batched beam search: utterances x beams in one tensor batch per step."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.model.speller import Speller, SpellerState
from las.pretrain import silent_memory
from las.search.common import Hypothesis, Rules, Symbols, step_log_probs
from las.search.ctc_prefix import CTCPrefixScorer, PrefixState


@dataclass(frozen=True)
class Rows:
    """Everything kept per row — one beam of one utterance, `beam_size` rows per utterance."""

    memory: ListenerOutput
    speller: SpellerState
    tokens: torch.Tensor  # (rows,) the last symbol of each prefix
    history: torch.Tensor  # (rows, steps) the prefix
    attention: torch.Tensor  # (rows, steps + 1, frames) the weights behind each symbol
    max_lengths: torch.Tensor  # (rows,)
    min_lengths: torch.Tensor  # (rows,)
    ctc: CTCPrefixScorer | None
    ctc_state: PrefixState | None
    language_model: SpellerState | None  # the fused LM's state after each prefix
    silence: ListenerOutput | None  # the LM's zero attention memory, one frame per row

    def extend(
        self,
        origin: torch.Tensor,
        tokens: torch.Tensor,
        speller: SpellerState,
        ctc_state: PrefixState | None,
        language_model: SpellerState | None,
    ) -> Rows:
        """Rows after a step: prefix `origin[row]` extended by `tokens[row]` (the same utterance)."""
        return replace(
            self,
            speller=speller.select(origin),
            tokens=tokens,
            history=torch.cat([self.history[origin], tokens[:, None]], dim=1),
            attention=self.attention[origin],
            ctc_state=ctc_state,
            language_model=language_model.select(origin) if language_model is not None else None,
        )

    def keep(self, rows: torch.Tensor) -> Rows:
        """Only `rows`: the beams of utterances still searching, so that finished ones cost nothing."""
        ctc_state = self.ctc_state
        if ctc_state is not None:
            ctc_state = ctc_state._replace(
                forward=ctc_state.forward[:, :, rows], score=ctc_state.score[rows], last=ctc_state.last[rows]
            )
        return Rows(
            self.memory.select(rows),
            self.speller.select(rows),
            self.tokens[rows],
            self.history[rows],
            self.attention[rows],
            self.max_lengths[rows],
            self.min_lengths[rows],
            self.ctc.select(rows) if self.ctc is not None else None,
            ctc_state,
            self.language_model.select(rows) if self.language_model is not None else None,
            self.silence.select(rows) if self.silence is not None else None,
        )


@dataclass(frozen=True)
class BeamSearch:
    """Keeps the `beam_size` best prefixes of each utterance; a prefix that ends among the best
    `beam_size` candidates of a step is final. An utterance is done with `beam_size` final
    hypotheses, or at its length limit. With `ctc_weight` λ each step scores
    (1 - λ) · attention + λ · CTC prefix increment (Watanabe et al. 2017); with a
    `language_model` and `lm_weight` β, plus β · log p_LM (shallow fusion, Gulcehre et al. 2015)."""

    symbols: Symbols
    rules: Rules
    beam_size: int
    nbest: int
    ctc_weight: float
    language_model: Speller | None = None  # a character LM written by `las pretrain`
    lm_weight: float = 0.0

    @torch.no_grad()
    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        beams, eos = self.beam_size, self.symbols.eos
        device = memory.values.device
        utterances = torch.arange(memory.values.shape[0], device=device)  # original index of each live utterance
        rows = self.start(model, memory.select(utterances.repeat_interleave(beams)))
        # All beams of an utterance start as the same empty prefix: keep one alive.
        scores = torch.full((len(utterances), beams), float("-inf"), device=device)
        scores[:, 0] = 0.0
        finals: list[list[Hypothesis]] = [[] for _ in range(len(utterances))]
        for step in range(int(rows.max_lengths.max())):
            batch = len(utterances)
            log_probs, speller = step_log_probs(model, rows.tokens, rows.speller, rows.memory, self.symbols, self.rules)
            rows = replace(rows, attention=torch.cat([rows.attention, speller.weights[:, None, :]], dim=1))
            step_scores = log_probs  # (batch * beams, vocabulary)
            if rows.ctc is not None:
                increments, ctc_forward = rows.ctc.score(rows.ctc_state)
                step_scores = (1 - self.ctc_weight) * log_probs + self.ctc_weight * increments
            if rows.language_model is not None:
                lm_logits, language_model = self.language_model.step(rows.tokens, rows.language_model, rows.silence)
                step_scores = step_scores + self.lm_weight * lm_logits.float().log_softmax(dim=-1)
            candidates = self.allowed(scores.reshape(-1, 1) + step_scores, log_probs, step + 1, rows)
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
                        rows.attention[row, :, : rows.memory.lengths[row]].cpu(),
                    )
                )
            # Continue with the best `beams` candidates that do not end.
            keep = (top_tokens == eos).long().argsort(dim=1, stable=True)[:, :beams]  # (batch, beams)
            scores = top_scores.gather(1, keep)
            origin = top_origin.gather(1, keep).reshape(-1)
            tokens = top_tokens.gather(1, keep).reshape(-1)
            ctc_state = None
            if rows.ctc is not None:
                ctc_state = rows.ctc.select_extensions(ctc_forward, increments, rows.ctc_state, origin, tokens)
            rows = rows.extend(
                origin, tokens, speller, ctc_state, language_model if rows.language_model is not None else None
            )
            done = torch.tensor([len(finals[index]) >= beams for index in original], device=device)
            done |= ~torch.isfinite(scores).any(dim=1)
            if done.all():
                break
            if done.any():
                live = (~done).nonzero().squeeze(1)
                rows = rows.keep((live[:, None] * beams + torch.arange(beams, device=device)).reshape(-1))
                scores, utterances = scores[live], utterances[live]
        return [sorted(hypotheses, key=self.rules.rank, reverse=True)[: self.nbest] for hypotheses in finals]

    def start(self, model: LAS, memory: ListenerOutput) -> Rows:
        """The rows before the first step: every beam an empty prefix after <sos>."""
        rows = memory.values.shape[0]
        device = memory.values.device
        ctc = ctc_state = ctc_log_probs = None
        if model.ctc_head is not None:  # one pass of the head, for the prefix score and the length limit
            ctc_log_probs = model.ctc_head(memory.hidden).log_softmax(-1)
        if self.ctc_weight > 0:
            ctc = CTCPrefixScorer.from_log_probs(ctc_log_probs, memory.lengths, self.symbols.blank, self.symbols.eos)
            ctc_state = ctc.initial_state()
        language_model = silence = None
        if self.language_model is not None and self.lm_weight > 0:
            attention = self.language_model.attention_dimensions
            silence = silent_memory(rows, *attention, device)
            language_model = self.language_model.initial_state(silence)
        return Rows(
            memory=memory,
            speller=model.speller.initial_state(memory),
            tokens=torch.full((rows,), self.symbols.sos, dtype=torch.long, device=device),
            history=torch.empty(rows, 0, dtype=torch.long, device=device),
            attention=torch.empty(rows, 0, memory.values.shape[1], device=device),
            max_lengths=self.rules.max_lengths(model, memory, ctc_log_probs),
            min_lengths=self.rules.min_lengths(memory),
            ctc=ctc,
            ctc_state=ctc_state,
            language_model=language_model,
            silence=silence,
        )

    def allowed(self, candidates: torch.Tensor, log_probs: torch.Tensor, length: int, rows: Rows) -> torch.Tensor:
        """`candidates` `(rows, vocabulary)` with -inf where a rule forbids the extension: <eos> too
        early or too unlikely; anything but <eos> at the length limit (where <eos> always may come).
        `length` counts the output symbols once extended, <eos> included."""
        eos = self.symbols.eos
        at_limit = length >= rows.max_lengths  # (rows,)
        may_end = self.rules.may_end(log_probs, length, rows.min_lengths, eos) | at_limit
        candidates[:, eos] = candidates[:, eos].masked_fill(~may_end, float("-inf"))
        not_eos = torch.arange(candidates.shape[1], device=candidates.device) != eos
        return candidates.masked_fill(at_limit[:, None] & not_eos[None, :], float("-inf"))
