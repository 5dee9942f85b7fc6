"""Joint CTC and attention decoding as the frames arrive: CTC-triggered attention (Moritz, Hori and
Le Roux, 2019) over a frame-synchronous CTC prefix beam search.

Each encoder frame, once heard, extends the beam's prefixes by the characters the CTC head gives
there (prefix beam search: a prefix's probability is that of every CTC path that collapses to it,
ending in a blank or in its last character). The speller scores each extension when the CTC head
first emits it, the trigger: its attention reads the segment's frames up to that one and
`lookahead_frames` more (the head's spike comes before the character's sound; each frame is
searched once those have arrived) and no further, so later audio changes no score. A prefix
ranks by `ctc_weight` x its CTC log probability plus (1 - `ctc_weight`) x the speller's, and
`length_penalty` per character, as offline joint decoding weighs the two.

What every prefix in the beam shares is final: each later hypothesis extends one of them, so
words are final as soon as the beam agrees on them. A prefix that ranks `beam_nats` under the
best leaves the beam: the CTC head scores the frames after two prefixes part alike, so a rival
that fell behind on a word stays behind by as much, and kept, it would hold that word back.

A segment ends once no character has come for `pause_frames` (or after `longest_frames`): its
best prefix, with the speller's <eos>, is final, and the next segment starts afresh without the
frames of this one, as decoding whole cuts a long recording at its pauses. With a `second_pass`,
nothing is final before the segment ends, and then what the second pass makes of its frames is
(las.recognition.second_pass); and the segment ends there only once the second pass hears that
the audio, too, has paused since the last character (`SecondPass.quiet`). A stream keeps the
beam and the current segment's frames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Protocol

import torch

from las.core.errors import LasError
from las.model.listener import ListenerOutput
from las.model.monotonic import GMMAttention
from las.model.speller import Speller, SpellerState
from las.search.common import Symbols
from las.search.monotonic_stream import Judge, Spelt, pad_frames

# A character whose CTC log probability at a frame is this far under the frame's likeliest symbol
# extends no prefix there: under e^-10 of the frame's mass.
CANDIDATE_NATS = 10.0


class SecondPass(Protocol):
    """A segment decoded whole (las.recognition.second_pass.SegmentDecoder)."""

    def __call__(self, start: int, end: int, until: int | None, given: int = 0) -> list[Spelt]:
        """The final characters of the segment of frames `[start, end)` (from the recording's start)
        whose words are centred in frames `[given, until)` (and those the segment before left to
        it); `until` None where the first pass spelt nothing there."""
        ...

    def early(self, start: int, end: int, given: int, until: int) -> tuple[list[Spelt], int]:
        """The words centred in frames `[given, until)` of the segment begun at `start`, heard to
        `end`, and the frame they end at (`until`, or earlier where the last word waits for the next)."""
        ...

    def finish(self) -> list[Spelt]:
        """What the segments decoded left for the next, once no next will come."""
        ...

    def quiet(self, start: int, since: int, end: int) -> bool:
        """Whether the audio of the segment of frames `[start, end)` heard so far has paused since frame `since`."""
        ...


def log_add(first: float, second: float) -> float:
    """log(e^first + e^second), exact where either is -inf."""
    if first < second:
        first, second = second, first
    return first if second == -math.inf else first + math.log1p(math.exp(second - first))


@dataclass
class Prefix:
    """A hypothesis of the current segment: its characters, each at the frame the CTC head first
    emitted it, and its scores."""

    characters: tuple[Spelt, ...]
    blank: float = -math.inf  # log P(the prefix said by the last frame, its path ending in a blank)
    label: float = -math.inf  # ... ending in its last character
    attention: float = 0.0  # the speller's log probability of its characters
    # The speller's state after attending for its last character; None for the empty prefix,
    # whose first step starts from the frames heard when it is taken.
    state: SpellerState | None = None

    @cached_property  # a beam's dictionaries are keyed by it, many times a frame
    def tokens(self) -> tuple[int, ...]:
        return tuple(item.token for item in self.characters)

    @property
    def ctc(self) -> float:
        """log P(the prefix said by the last frame)."""
        return log_add(self.blank, self.label)

    def successor(self) -> Prefix:
        """The same prefix at the next frame, its CTC probabilities to be summed anew."""
        return Prefix(self.characters, attention=self.attention, state=self.state)


class TriggeredSearch:
    """`extend` with the listener's keys, values and CTC log-probabilities as they come, then
    `spell`: the pieces of segments that became final; `partial` is the rest of the best prefix.
    `speller` None searches with the CTC head alone."""

    def __init__(
        self,
        speller: Speller | None,
        symbols: Symbols,
        space: int,
        beam_size: int,
        ctc_weight: float,
        length_penalty: float,
        beam_nats: float,
        pause_frames: int,
        longest_frames: int,
        judge: Judge | None = None,
        lookahead_frames: int = 0,
        second_pass: SecondPass | None = None,
        early_words: bool = False,
    ) -> None:
        if speller is not None and not isinstance(speller, Speller):
            raise LasError(
                "streaming joint CTC and attention decoding scores with the LSTM speller (model.speller=lstm)"
            )
        self.speller, self.symbols, self.space, self.beam_size = speller, symbols, space, beam_size
        self.ctc_weight = 1.0 if speller is None else ctc_weight
        self.length_penalty, self.beam_nats = length_penalty, beam_nats
        self.pause_frames, self.longest_frames = pause_frames, longest_frames
        self.judge = judge  # each character's confidence when it is first emitted
        self.lookahead = lookahead_frames  # frames past the trigger the speller reads
        self.second_pass = second_pass
        self.early_words = early_words  # with a second pass: each word final once the next is begun
        self.keys: list[torch.Tensor] = []  # (key_dim,) per frame of the current segment heard
        self.values: list[torch.Tensor] = []
        self.log_probs: list[torch.Tensor] = []  # (vocabulary,) per frame heard, not yet searched
        self.searched = 0  # frames searched, from the recording's start
        if speller is not None:
            self.weights = speller.recurrent_weights()
            self.pads_history = not isinstance(speller.attention, GMMAttention)  # a GMM's is its positions
        self.start_segment()

    def start_segment(self) -> None:
        """A new segment from the next frame to be searched: the frames before it are dropped."""
        self.beam, self.finals, self.origin = [Prefix((), blank=0.0)], 0, self.searched
        self.given = self.origin  # the second pass has given the segment's words centred before this frame
        self.asked = self.origin  # ... and was last asked for the words before this one (early_words)
        searched = len(self.keys) - len(self.log_probs)  # frames kept that the segment which ended searched
        self.keys, self.values = self.keys[searched:], self.values[searched:]

    def extend(self, keys: torch.Tensor, values: torch.Tensor, log_probs: torch.Tensor) -> None:
        """The next encoder frames: keys `(frames, key_dim)`, values `(frames, value_dim)` and the
        CTC head's log-probabilities `(frames, vocabulary)`."""
        if self.speller is not None:
            self.keys += list(keys)
            self.values += list(values)
        self.log_probs += list(log_probs.float().cpu())

    @torch.no_grad()
    def spell(self, finished: bool) -> list[list[Spelt]]:
        """Search the frames heard: what became final, in pieces of segments (with `finished`,
        everything)."""
        pieces = []
        while len(self.log_probs) > self.lookahead or (finished and self.log_probs):
            self.search(self.log_probs.pop(0))
            self.searched += 1
            best = self.beam[0].characters
            paused = bool(best) and self.searched - 1 - best[-1].frame >= self.pause_frames
            quiet = paused and (
                self.second_pass is None or self.second_pass.quiet(self.origin, best[-1].frame + 1, self.searched)
            )
            if quiet or self.searched - self.origin >= self.longest_frames:
                pieces.append(self.end_segment())
            elif paused and self.early_words:  # the speech goes on: the words before the pause, and the segment on
                pieces.append(self.words_at_a_pause())
            else:
                pieces.append(self.words_the_beam_agrees_on())
        if finished and self.searched > self.origin:
            pieces.append(self.end_segment())
        if finished and self.second_pass is not None:
            pieces.append(self.second_pass.finish())
        return [piece for piece in pieces if piece]

    @property
    def partial(self) -> list[Spelt]:
        """The best prefix's characters beyond those given as final."""
        return list(self.beam[0].characters[self.finals :])

    def score(self, prefix: Prefix) -> float:
        speller = (1 - self.ctc_weight) * prefix.attention if self.ctc_weight < 1 else 0.0
        return self.ctc_weight * prefix.ctc + speller + self.length_penalty * len(prefix.characters)

    def search(self, log_probs: torch.Tensor) -> None:
        """One frame of prefix beam search: each prefix stays (a blank, or its last character
        again) or grows by a character the frame gives."""
        candidates = self.candidates(log_probs)
        frames = min(
            self.searched - self.origin + 1 + self.lookahead, len(self.keys)
        )  # the segment's, to this one's look-ahead
        steps = self.speller_steps(self.beam, frames) if candidates and self.speller is not None else {}
        beam = {prefix.tokens: prefix for prefix in self.beam}
        grown: dict[tuple[int, ...], Prefix] = {}
        fresh: set[tuple[int, ...]] = set()  # prefixes this frame grew: their last character is new
        for prefix in self.beam:
            stay = grown.setdefault(prefix.tokens, prefix.successor())
            stay.blank = log_add(stay.blank, prefix.ctc + float(log_probs[self.symbols.blank]))
            last = prefix.characters[-1].token if prefix.characters else None
            if last is not None:
                stay.label = log_add(stay.label, prefix.label + float(log_probs[last]))
            for token in candidates:
                tokens = (*prefix.tokens, token)
                if tokens not in grown:  # a prefix in the beam already keeps its scores and state
                    if tokens in beam:
                        grown[tokens] = beam[tokens].successor()
                    else:
                        grown[tokens] = self.grow(prefix, token, steps)
                        fresh.add(tokens)
                before = prefix.blank if token == last else prefix.ctc  # a repeat needs a blank between
                grown[tokens].label = log_add(grown[tokens].label, before + float(log_probs[token]))
        ranked = sorted(grown.values(), key=self.score, reverse=True)[: self.beam_size]
        best = self.score(ranked[0])
        self.beam = [prefix for prefix in ranked if self.score(prefix) >= best - self.beam_nats]
        if self.judge is not None:  # only for the few that stay: most grown prefixes leave the beam
            for prefix in self.beam:
                if prefix.tokens in fresh:
                    self.judged(prefix, steps, log_probs)

    def candidates(self, log_probs: torch.Tensor) -> list[int]:
        """The characters this frame may emit: within CANDIDATE_NATS of its likeliest symbol."""
        allowed = log_probs >= log_probs.max() - CANDIDATE_NATS
        excluded = [self.symbols.blank, self.symbols.eos, *self.symbols.forbidden]
        allowed[excluded] = False
        return allowed.nonzero().flatten().tolist()

    def grow(
        self, prefix: Prefix, token: int, steps: dict[tuple[int, ...], tuple[torch.Tensor, SpellerState]]
    ) -> Prefix:
        """`prefix` and `token`, emitted at this frame, scored by the speller's step for it."""
        speller_log_probs, state = steps.get(prefix.tokens, (None, None))
        grown = Prefix((*prefix.characters, Spelt(token, self.searched)), attention=prefix.attention)
        if speller_log_probs is not None:
            grown.attention, grown.state = prefix.attention + float(speller_log_probs[token]), state
        return grown

    def judged(
        self,
        prefix: Prefix,
        steps: dict[tuple[int, ...], tuple[torch.Tensor, SpellerState]],
        ctc_log_probs: torch.Tensor,  # (vocabulary,) this frame's
    ) -> None:
        """The confidence of `prefix`'s last character, new at this frame: from the speller's step
        that gave it and this frame's CTC distribution (the first frame of the character's span,
        where the head's peak for it usually is)."""
        assert self.judge is not None
        *before, last = prefix.characters
        speller_log_probs, _ = steps.get(prefix.tokens[:-1], (None, None))
        confidence = self.judge(last.token, speller_log_probs, ctc_log_probs)
        prefix.characters = (*before, replace(last, confidence=confidence))  # the same tokens

    def speller_steps(
        self, prefixes: list[Prefix], frames: int
    ) -> dict[tuple[int, ...], tuple[torch.Tensor, SpellerState]]:
        """Each prefix's next step of the speller, attending over the segment's first `frames`
        frames: its log-probabilities `(vocabulary,)` for the next character, and its state after."""
        speller = self.speller
        assert speller is not None
        rows = len(prefixes)
        keys = torch.stack(self.keys[:frames])[None].expand(rows, -1, -1)  # (rows, frames, key_dim)
        values = torch.stack(self.values[:frames])[None].expand(rows, -1, -1)
        mask = torch.ones(rows, frames, dtype=torch.bool, device=keys.device)
        memory = ListenerOutput(keys, values, mask, mask.sum(dim=1), values)
        first = ListenerOutput(keys[:1], values[:1], mask[:1], mask[:1].sum(dim=1), values[:1])
        initial = speller.initial_state(first)  # the empty prefix's: from the frames heard so far
        states = [self.widened(prefix.state or initial, frames) for prefix in prefixes]
        state = SpellerState(*(stacked(parts) for parts in zip(*states, strict=True)))
        previous = [prefix.characters[-1].token if prefix.characters else self.symbols.sos for prefix in prefixes]
        gates = speller.token_gates(keys.new_tensor(previous, dtype=torch.long))
        output, after = speller.advance(gates, state, memory, self.weights)
        log_probs = speller.distribution(output, after.context).float().log_softmax(dim=-1)
        return {
            prefix.tokens: (log_probs[row], after.select(keys.new_tensor([row], dtype=torch.long)))
            for row, prefix in enumerate(prefixes)
        }

    def widened(self, state: SpellerState, frames: int) -> SpellerState:
        """`state` over `frames` frames: the attention has weighed none of those it had not heard."""
        history = pad_frames(state.history, frames) if self.pads_history else state.history
        return state._replace(weights=pad_frames(state.weights, frames), history=history)

    def words_the_beam_agrees_on(self) -> list[Spelt]:
        """The words every prefix of the beam shares beyond those given as final, each with the
        space after it: no later hypothesis can change them. With a second pass, none are before
        the segment ends, or with `early_words` those the second pass gives once the best prefix
        has begun a word after them."""
        if self.second_pass is not None:
            return self.words_before_the_latest_space() if self.early_words else []
        shared = self.finals
        first = self.beam[0].characters
        while shared < len(first) and all(
            len(prefix.characters) > shared and prefix.characters[shared].token == first[shared].token
            for prefix in self.beam
        ):
            shared += 1
        space = next((index for index in range(shared - 1, self.finals - 1, -1) if self.is_space(first[index])), None)
        if space is None:
            return []
        piece, self.finals = list(first[self.finals : space + 1]), space + 1
        return piece

    def words_before_the_latest_space(self) -> list[Spelt]:
        """With a second pass: where the best prefix has spelt a space since the last words given,
        the segment so far decoded whole, its words centred before that space."""
        assert self.second_pass is not None
        best = self.beam[0].characters
        space = next((index for index in range(len(best) - 1, -1, -1) if self.is_space(best[index])), None)
        if space is None or best[space].frame <= self.asked:
            return []
        return self.second_pass_words(best[space].frame, space)

    def words_at_a_pause(self) -> list[Spelt]:
        """With a second pass word by word, where the first pass has paused and the audio has
        not: the segment so far decoded whole, and the words it would give were the segment to
        end there (centred before half a pause after the first pass's last character); the
        segment goes on."""
        until = self.owned_until()
        if until is None or until <= self.asked:
            return []
        return self.second_pass_words(until, len(self.beam[0].characters) - 1)

    def owned_until(self) -> int | None:
        """The frame half a pause after the best prefix's last character (None where it has
        none): a segment ends a pause after it, and a word the second pass centres past half of
        that was heard before the first pass began it, so it is the next segment's."""
        best = self.beam[0].characters
        return best[-1].frame + 1 + self.pause_frames // 2 if best else None

    def second_pass_words(self, until: int, last: int) -> list[Spelt]:
        """The second pass's words centred before frame `until`, the first pass's characters up
        to index `last` having been spelt before it."""
        assert self.second_pass is not None
        best = self.beam[0].characters
        self.asked = until
        piece, self.given = self.second_pass.early(self.origin, self.searched, self.given, until)
        # partial results show what follows the words given: from the first pass's space before `given`
        self.finals = next(
            (
                index + 1
                for index in range(last, self.finals - 1, -1)
                if (self.is_space(best[index]) and best[index].frame <= self.given)
                or (index == len(best) - 1 and best[index].frame < self.given)  # all spelt given
            ),
            self.finals,
        )
        return piece

    def end_segment(self) -> list[Spelt]:
        """The rest of the segment beyond what was final, and a new segment: its best prefix with
        the speller's <eos>, or what the second pass makes of it."""
        if self.second_pass is not None:
            piece = self.second_pass(self.origin, self.searched, self.owned_until(), self.given)
        else:
            piece = list(self.ended().characters[self.finals :])
        self.start_segment()
        return piece

    def ended(self) -> Prefix:
        """The best prefix once the speller's <eos> is scored after each."""
        if self.speller is None or self.ctc_weight == 1 or len(self.beam) == 1:
            return self.beam[0]
        ends = self.speller_steps(self.beam, self.searched - self.origin)
        ending = {tokens: float(log_probs[self.symbols.eos]) for tokens, (log_probs, _) in ends.items()}
        return max(self.beam, key=lambda prefix: self.score(prefix) + (1 - self.ctc_weight) * ending[prefix.tokens])

    def is_space(self, spelt: Spelt) -> bool:
        return spelt.token == self.space


def stacked(parts: tuple[torch.Tensor | tuple[torch.Tensor, ...], ...]) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """States' fields, each `(1, ...)` or a tuple of per-layer `(1, ...)`, as one batch."""
    if isinstance(parts[0], tuple):
        return tuple(torch.cat(layer) for layer in zip(*parts, strict=True))
    return torch.cat(parts)  # type: ignore[arg-type]
