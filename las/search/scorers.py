"""Scorers: the sources of next-symbol scores that a search joins with weights.

Every scorer answers four questions for a batch of rows (hypotheses): the state before the first
symbol (`start`), the log-score of every possible next symbol (`score`), the state of the
prefixes the search chose (`advance`), and that of the rows it keeps (`keep`). The speller always
scores; the CTC prefix score (las.search.ctc_prefix) and a character LM join it when asked. Every
strategy but CTC greedy drives the same `JointScorer`, so a combination valid for one is valid for
all: greedy with CTC and an LM is beam search of one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import torch

from las.core.errors import LasError
from las.model.las import LAS, AnySpeller
from las.model.listener import ListenerOutput
from las.model.pretrained import silent_memory
from las.model.speller import SpellerState
from las.model.transformer_speller import CrossMemory, TransformerState
from las.search.common import Heard, Rules, Symbols
from las.search.ctc_prefix import CTCPrefixScorer
from las.search.lexicon import Lexicon, LexiconScorer


class Scorer(Protocol):
    def start(self, heard: Heard) -> Any: ...

    def score(self, state: Any, tokens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Log-scores `(rows, vocabulary)` of every symbol after each row's prefix, whose last
        symbol is `tokens` `(rows,)`, and what `advance` needs."""
        ...

    def advance(self, scored: Any, origin: torch.Tensor, tokens: torch.Tensor) -> Any:
        """The state of the prefixes chosen: row `origin[i]`'s prefix followed by `tokens[i]`."""
        ...

    def keep(self, state: Any, rows: torch.Tensor) -> Any: ...


class SpellerRows(NamedTuple):
    state: SpellerState | TransformerState
    memory: ListenerOutput | CrossMemory  # what the speller attends to, per row (Speller.prepare)


@dataclass(frozen=True)
class SpellerScorer:
    """log p(next character | prefix, audio) from the attention speller, with `forbidden`
    symbols at -inf and the attention where `rules` let it look; or, `silent`, a character LM
    written by `las pretrain`: a speller that hears one silent frame, so only the text speaks."""

    speller: AnySpeller
    forbidden: tuple[int, ...] = ()
    rules: Rules = Rules()
    silent: bool = False

    def start(self, heard: Heard) -> SpellerRows:
        memory = heard.memory
        if self.silent:
            memory = silent_memory(len(memory.lengths), *self.speller.attention_dimensions, memory.values.device)
        memory = self.speller.prepare(memory)
        return SpellerRows(self.speller.initial_state(memory), memory)

    def score(self, state: SpellerRows, tokens: torch.Tensor) -> tuple[torch.Tensor, SpellerRows]:
        logits, speller = self.speller.step(tokens, state.state, self.rules.attend(state.memory, state.state.weights))
        log_probs = logits.float().log_softmax(dim=-1)
        for symbol in self.forbidden:  # one at a time: a list index would be a copy from the host
            log_probs[:, symbol] = float("-inf")
        return log_probs, SpellerRows(speller, state.memory)

    def advance(self, scored: SpellerRows, origin: torch.Tensor, tokens: torch.Tensor) -> SpellerRows:
        # The speller reads the chosen symbol at the next step; row `origin[i]` is of row i's
        # utterance, so the memory stays.
        return SpellerRows(scored.state.select(origin), scored.memory)

    def keep(self, state: SpellerRows, rows: torch.Tensor) -> SpellerRows:
        return SpellerRows(state.state.select(rows), state.memory.select(rows))


@dataclass(frozen=True)
class Scoring:
    """Which scorers join the speller, and their weights: (1 - ctc_weight) · speller +
    ctc_weight · CTC prefix + lm_weight · LM (shallow fusion, Gulcehre et al. 2015); and a
    lexicon, whose 0 or -inf only allows or forbids."""

    ctc_weight: float = 0.0
    language_model: AnySpeller | None = None  # a character LM written by `las pretrain`
    lm_weight: float = 0.0
    ctc_window_nats: float = 0.0  # las.search.ctc_prefix: 0 sums over every frame
    lexicon: Lexicon | None = None  # on the model's device

    def joint(self, model: LAS, symbols: Symbols, rules: Rules) -> JointScorer:
        others: list[tuple[float, Scorer]] = []
        if self.ctc_weight > 0:
            if model.ctc_head is None:
                raise LasError("decode.ctc_weight > 0 needs a model trained with a CTC head (model.ctc_weight > 0)")
            others.append((self.ctc_weight, CTCPrefixScorer(symbols.blank, symbols.eos, self.ctc_window_nats)))
        if self.language_model is not None and self.lm_weight > 0:
            others.append((self.lm_weight, SpellerScorer(self.language_model, silent=True)))
        if self.lexicon is not None:
            others.append((1.0, LexiconScorer(self.lexicon.edges, rules, symbols.eos)))
        speller = SpellerScorer(model.speller, symbols.forbidden, rules)
        return JointScorer(speller, 1 - self.ctc_weight, tuple(others))


class Scored(NamedTuple):
    total: torch.Tensor  # (rows, vocabulary) the weighted sum of every scorer's log-scores
    speller: torch.Tensor  # (rows, vocabulary) the speller's own log-probabilities (for the <eos> rules)
    weights: torch.Tensor  # (rows, frames) the attention weights behind this step's symbol
    states: tuple[Any, ...]  # per scorer, for `JointScorer.advance`


@dataclass(frozen=True)
class JointScorer:
    """The speller and the other scorers with their weights; a row's state is the tuple of its
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
        return tuple(map(lambda scorer, state: scorer.advance(state, origin, tokens), self.scorers, scored.states))

    def keep(self, states: tuple[Any, ...], rows: torch.Tensor) -> tuple[Any, ...]:
        return tuple(map(lambda scorer, state: scorer.keep(state, rows), self.scorers, states))
