"""Scorers: the sources of next-symbol scores that a search joins with weights.

Every scorer answers the same four questions for a batch of rows (hypotheses): its state before
the first symbol (`start`), the log-score of every possible next symbol (`score`), the state of
the prefixes the search chose (`advance`), and the state of the rows it keeps (`keep`). The
speller (attention) always scores; the CTC prefix score and a character language model join it
when asked. Every strategy — greedy, random and beam search — drives the same `JointScorer`, so
a combination valid for one is valid for all (greedy with CTC and an LM is beam search of one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import torch

from las.errors import LasError
from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.model.pretrained import silent_memory
from las.model.speller import Speller, SpellerState
from las.search.common import Heard, Rules, Symbols
from las.search.ctc_prefix import CTCPrefixScorer


class Scorer(Protocol):
    def start(self, heard: Heard) -> Any:
        """The state of every row before its first symbol."""
        ...

    def score(self, state: Any, tokens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Log-scores `(rows, vocabulary)` of every symbol after each row's prefix, whose last
        symbol is `tokens` `(rows,)`, and a state that knows them all, for `advance`."""
        ...

    def advance(self, scored: Any, origin: torch.Tensor, tokens: torch.Tensor) -> Any:
        """The state of the prefixes the search chose: row `origin[i]`'s prefix followed by `tokens[i]`."""
        ...

    def keep(self, state: Any, rows: torch.Tensor) -> Any:
        """The state of `rows` only (beam search drops the rows of finished utterances)."""
        ...


class SpellerRows(NamedTuple):
    state: SpellerState
    memory: ListenerOutput  # what the speller attends to, per row


@dataclass(frozen=True)
class SpellerScorer:
    """log p(next character | prefix, audio) from the attention speller. Forbidden symbols
    (<pad>, <sos>) score -inf; `rules` may narrow where the attention looks."""

    speller: Speller
    symbols: Symbols
    rules: Rules

    def start(self, heard: Heard) -> SpellerRows:
        return SpellerRows(self.speller.initial_state(heard.memory), heard.memory)

    def score(self, state: SpellerRows, tokens: torch.Tensor) -> tuple[torch.Tensor, SpellerRows]:
        memory = self.rules.attend(state.memory, state.state.weights)
        logits, speller = self.speller.step(tokens, state.state, memory)
        log_probs = logits.float().log_softmax(dim=-1)
        log_probs[:, list(self.symbols.forbidden)] = float("-inf")
        return log_probs, SpellerRows(speller, state.memory)

    def advance(self, scored: SpellerRows, origin: torch.Tensor, tokens: torch.Tensor) -> SpellerRows:
        # The speller reads the chosen symbol at the next step; a row's origin is a row of the
        # same utterance, so the memory stays.
        return SpellerRows(scored.state.select(origin), scored.memory)

    def keep(self, state: SpellerRows, rows: torch.Tensor) -> SpellerRows:
        return SpellerRows(state.state.select(rows), state.memory.select(rows))


@dataclass(frozen=True)
class CTCScorer:
    """The CTC prefix score (Watanabe et al. 2017): log p(prefix + c...) - log p(prefix...) under
    the CTC head, for every next character c; for <eos>, the probability of exactly the prefix."""

    symbols: Symbols
    window_nats: float  # frames where the prefix is this much less likely than at its peak are skipped

    def start(self, heard: Heard) -> tuple[CTCPrefixScorer, Any]:
        assert heard.ctc_log_probs is not None  # Scoring.joint checks the model has a CTC head
        prefixes = CTCPrefixScorer.from_log_probs(
            heard.ctc_log_probs, heard.memory.lengths, self.symbols.blank, self.symbols.eos, self.window_nats
        )
        return prefixes, prefixes.initial_state()

    def score(self, state: tuple[CTCPrefixScorer, Any], tokens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        prefixes, prefix_state = state
        increments = prefixes.score(prefix_state)
        return increments, (prefixes, prefix_state, increments)

    def advance(self, scored: Any, origin: torch.Tensor, tokens: torch.Tensor) -> tuple[CTCPrefixScorer, Any]:
        prefixes, prefix_state, increments = scored
        return prefixes, prefixes.select_extensions(increments, prefix_state, origin, tokens)

    def keep(self, state: tuple[CTCPrefixScorer, Any], rows: torch.Tensor) -> tuple[CTCPrefixScorer, Any]:
        prefixes, prefix_state = state
        return prefixes.select(rows), prefixes.select_state(prefix_state, rows)


@dataclass(frozen=True)
class LanguageModelScorer:
    """log p_LM(next character | prefix) from a character LM written by `las pretrain`: a speller
    that attends to one silent frame, so only the text it has read speaks."""

    language_model: Speller

    def start(self, heard: Heard) -> tuple[SpellerState, ListenerOutput]:
        rows = heard.memory.values.shape[0]
        silence = silent_memory(rows, *self.language_model.attention_dimensions, heard.memory.values.device)
        return self.language_model.initial_state(silence), silence

    def score(self, state: tuple[SpellerState, ListenerOutput], tokens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        speller, silence = state
        logits, speller = self.language_model.step(tokens, speller, silence)
        return logits.float().log_softmax(dim=-1), (speller, silence)

    def advance(self, scored: Any, origin: torch.Tensor, tokens: torch.Tensor) -> tuple[SpellerState, ListenerOutput]:
        speller, silence = scored
        return speller.select(origin), silence

    def keep(self, state: tuple[SpellerState, ListenerOutput], rows: torch.Tensor) -> Any:
        speller, silence = state
        return speller.select(rows), silence.select(rows)


@dataclass(frozen=True)
class Scoring:
    """Which scorers join the speller, and how much each weighs:
    (1 - ctc_weight) · speller + ctc_weight · CTC prefix + lm_weight · LM (shallow fusion,
    Gulcehre et al. 2015). Every strategy takes one."""

    ctc_weight: float = 0.0
    language_model: Speller | None = None  # a character LM written by `las pretrain`
    lm_weight: float = 0.0
    ctc_window_nats: float = 0.0  # las.search.ctc_prefix: 0 scores over every frame

    def joint(self, model: LAS, symbols: Symbols, rules: Rules) -> JointScorer:
        parts: list[tuple[float, Scorer]] = []
        if self.ctc_weight > 0:
            if model.ctc_head is None:
                raise LasError("decode.ctc_weight > 0 needs a model trained with a CTC head (model.ctc_weight > 0)")
            parts.append((self.ctc_weight, CTCScorer(symbols, self.ctc_window_nats)))
        if self.language_model is not None and self.lm_weight > 0:
            parts.append((self.lm_weight, LanguageModelScorer(self.language_model)))
        return JointScorer(SpellerScorer(model.speller, symbols, rules), 1 - self.ctc_weight, tuple(parts))


class Scored(NamedTuple):
    total: torch.Tensor  # (rows, vocabulary) the weighted sum of every scorer's log-scores
    speller: torch.Tensor  # (rows, vocabulary) the speller's own log-probabilities (for the <eos> rules)
    weights: torch.Tensor  # (rows, frames) the attention weights behind this step's symbol
    states: tuple[Any, ...]  # per scorer, for `JointScorer.advance`


@dataclass(frozen=True)
class JointScorer:
    """The speller and the other scorers, with their weights: a row's state is the tuple of its
    scorers' states, the speller's first."""

    speller: SpellerScorer
    speller_weight: float
    others: tuple[tuple[float, Scorer], ...]

    @property
    def scorers(self) -> tuple[Scorer, ...]:
        return (self.speller, *(scorer for _, scorer in self.others))

    def start(self, heard: Heard) -> tuple[Any, ...]:
        return tuple(scorer.start(heard) for scorer in self.scorers)

    def score(self, states: tuple[Any, ...], tokens: torch.Tensor) -> Scored:
        log_probs, speller = self.speller.score(states[0], tokens)
        # 1.0 * x is x exactly: a speller alone scores as it always has.
        total = log_probs if self.speller_weight == 1 else self.speller_weight * log_probs
        scored = [speller]
        for (weight, scorer), state in zip(self.others, states[1:], strict=True):
            scores, after = scorer.score(state, tokens)
            total = total + weight * scores
            scored.append(after)
        return Scored(total, log_probs, speller.state.weights, tuple(scored))

    def advance(self, scored: Scored, origin: torch.Tensor, tokens: torch.Tensor) -> tuple[Any, ...]:
        return tuple(
            scorer.advance(state, origin, tokens) for scorer, state in zip(self.scorers, scored.states, strict=True)
        )

    def keep(self, states: tuple[Any, ...], rows: torch.Tensor) -> tuple[Any, ...]:
        return tuple(scorer.keep(state, rows) for scorer, state in zip(self.scorers, states, strict=True))
