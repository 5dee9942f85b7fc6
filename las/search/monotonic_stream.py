"""Greedy spelling while the listener's frames arrive, with an attention that only moves forward.

A monotonic attention (`model.attention=monotonic`, or MoChA: `monotonic_chunk`) selects, at
each character, the first frame at or after its last whose selection probability is at least
1/2 (las.model.monotonic.hard_alignment). Once such a frame has arrived, later audio cannot
change the step: each character is final when it is spelt, and spelling is what decoding the
whole recording gives. A step whose attention selects none of the frames so far waits for more;
the frames it passed over will not be selected by it, so they are dropped and what a stream
keeps stays bounded however long it runs. At <eos> a segment ends and the next begins where it
stopped: a recording of any length is spelt as segments.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from las.core.errors import LasError
from las.model.listener import ListenerOutput
from las.model.monotonic import MonotonicAttention
from las.model.speller import Speller, SpellerState
from las.search.common import Rules, Symbols


@dataclass(frozen=True)
class Spelt:
    """A character, the encoder frame (from the recording's start) its attention selected (or
    where the CTC head emitted it), and how far to trust it (None: not measured)."""

    token: int
    frame: int
    confidence: float | None = None


# A character's confidence from the distributions it was spelt with: its token, the speller's
# log-probabilities `(vocabulary,)` at its step and the CTC head's at its frame (None where not
# used); None where not measured (las.recognition.confidence.CharacterConfidence).
Judge = Callable[[int, torch.Tensor | None, torch.Tensor | None], float | None]


class SpellerStream:
    """`extend` with the listener's keys and values as they come, then `spell`: the characters
    of the current segment grow in `segment`, and `spell` returns the segments it ended."""

    def __init__(
        self, speller: Speller, symbols: Symbols, rules: Rules, space: int, judge: Judge | None = None
    ) -> None:
        if not isinstance(speller, Speller) or not isinstance(speller.attention, MonotonicAttention):
            raise LasError(
                "a stream spells with the speller alone (decode.strategy=greedy, or a model without a CTC head) "
                "only with an attention that moves forward: model.attention=monotonic or monotonic_chunk; "
                "with a CTC head, decode.strategy=beam streams any attention"
            )
        self.speller, self.symbols, self.rules, self.space = speller, symbols, rules, space
        self.judge = judge
        self.weights = speller.recurrent_weights()
        key_dim, value_dim = speller.attention_dimensions
        parameter = next(speller.parameters())
        self.keys, self.values = parameter.new_zeros(0, key_dim), parameter.new_zeros(0, value_dim)
        # MoChA's soft chunk reads the frames before the selected one.
        self.behind = speller.attention.chunk_energy_width - 1
        self.origin = 0  # the frame of keys[0], from the recording's start
        self.position = 0  # the frame the attention selected last: where the next search begins
        self.state: SpellerState | None = None  # None: the next step begins a segment
        self.token = symbols.sos
        self.segment: list[Spelt] = []
        self.segment_start = 0  # the frame its first search began at
        self.finals = 0  # characters of the segment given as final

    @property
    def frames(self) -> int:
        """Encoder frames heard so far."""
        return self.origin + len(self.keys)

    def extend(self, keys: torch.Tensor, values: torch.Tensor, log_probs: torch.Tensor | None = None) -> None:
        """The next encoder frames' keys `(frames, key_dim)` and values `(frames, value_dim)` (the
        CTC head's `log_probs` are for las.search.triggered: the speller alone does not read them)."""
        self.keys, self.values = torch.cat([self.keys, keys]), torch.cat([self.values, values])
        if self.state is not None:
            self.state = self.state._replace(
                weights=pad_frames(self.state.weights, len(self.keys)),
                history=pad_frames(self.state.history, len(self.keys)),
            )

    @property
    def partial(self) -> list[Spelt]:
        """The current word: final as spelt, given as final with the space after it."""
        return self.segment[self.finals :]

    @torch.no_grad()
    def spell(self, finished: bool) -> list[list[Spelt]]:
        """Every character the frames so far decide (with `finished`, all the rest); what became
        final, in pieces: each word with its space, and the rest of a segment at its end."""
        ended = []
        while self.position < self.frames:
            memory = self.memory()
            state = self.state if self.state is not None else self.begin(memory)
            gates = self.speller.token_gates(self.keys.new_tensor([self.token], dtype=torch.long))
            output, after = self.speller.advance(gates, state, memory, self.weights)
            selected = bool(after.weights.abs().sum() > 0)
            if not selected and not finished:
                self.skip()
                break
            if not selected and self.state is None:
                break  # at the end, a segment begins only on a selected frame
            frame = self.origin + int(after.history[0].argmax()) if selected else self.position
            logits = self.speller.distribution(output, after.context)[0]  # (vocabulary,)
            token = self.choose(logits, frame)
            if token == self.symbols.eos:
                ended.append(self.segment[self.finals :])
                self.end_segment(frame)
                continue
            confidence = self.judge(token, logits.float().log_softmax(dim=-1), None) if self.judge else None
            self.segment.append(Spelt(token, frame, confidence))
            self.state, self.token, self.position = after, token, frame
            if token == self.space:
                ended.append(self.segment[self.finals :])
                self.finals = len(self.segment)
            self.forget()
        return [piece for piece in ended if piece]

    def memory(self) -> ListenerOutput:
        """The frames kept, as the speller reads a memory `(1, frames, ...)`."""
        keys, values = self.keys[None], self.values[None]
        mask = torch.ones(1, len(self.keys), dtype=torch.bool, device=keys.device)
        return ListenerOutput(keys, values, mask, mask.sum(dim=1), values)

    def begin(self, memory: ListenerOutput) -> SpellerState:
        """A segment's first state: the speller's, its attention at `position`."""
        self.segment_start = self.position
        return self.speller.initial_state(memory)._replace(history=self.at(self.position))

    def at(self, frame: int) -> torch.Tensor:
        """The attention's position on `frame`: `(1, frames)` one-hot over the frames kept."""
        history = self.keys.new_zeros(1, len(self.keys))
        history[0, frame - self.origin] = 1.0
        return history

    def choose(self, logits: torch.Tensor, frame: int) -> int:
        """The best symbol of `logits` `(vocabulary,)` for a step at `frame`, <eos> at the
        segment's length limit: `Rules.max_length_ratio` characters a frame it has spanned, plus
        5, as decoding whole limits a recording (counted to the step's frame, not to the frames
        heard: what arrives later changes no step)."""
        longest = math.ceil((frame + 1 - self.segment_start) * self.rules.max_length_ratio) + 5
        if len(self.segment) + 1 >= longest:
            return self.symbols.eos
        logits = logits.clone()
        logits[list(self.symbols.forbidden)] = float("-inf")
        return int(logits.argmax())

    def end_segment(self, frame: int) -> None:
        """The next segment begins at the frame after the one the last one ended on, so that a
        stream always moves on."""
        self.position = frame + 1
        self.state, self.token, self.segment, self.finals = None, self.symbols.sos, [], 0
        self.forget()

    def skip(self) -> None:
        """The waiting step's search starts again at the last frame: none of those before it was
        selected, and with the step's query fixed, none would be."""
        self.position = self.frames - 1
        self.forget()
        if self.state is not None:
            self.state = self.state._replace(history=self.at(self.position))

    def forget(self) -> None:
        """Drop the frames no later step can read: those before `position` (and MoChA's chunk
        behind it)."""
        drop = self.position - self.behind - self.origin
        if drop <= 0:
            return
        self.keys, self.values = self.keys[drop:], self.values[drop:]
        self.origin += drop
        if self.state is not None:
            self.state = self.state._replace(weights=self.state.weights[:, drop:], history=self.state.history[:, drop:])


def pad_frames(tensor: torch.Tensor, frames: int) -> torch.Tensor:
    """`(1, kept)` -> `(1, frames)`, zeros after."""
    return torch.nn.functional.pad(tensor, (0, frames - tensor.shape[1]))
