"""The CTC prefix score (Watanabe et al. 2017) of every next character of every hypothesis at once.

A search joined with CTC asks, per step, how likely each extended prefix `g + c` is under the CTC
head: the probability of all CTC paths whose collapsed output starts with `g + c`, a sum over the
frame t at which `c` is first emitted of P(`g` said by t - 1) x P(`c` at t). The forward variables
of a chosen `g + c` (ending in `c`, or in a blank, at every frame) follow from those of `g` by a
linear recurrence, which sums in closed form: neither needs a loop over the frames.

The sum need not cover every frame: a path that emits `c` where `g` is `window_nats` less likely
than the likeliest emission of any next character (or the likeliest end) adds less than
e^-window_nats of the best extension. It runs over the window where `g` is likelier, so a step's
character scores cost the window, not the recording; the forward variables, and with them every
<eos> score, stay exact. (ESPnet windows around the attention peak, trusting the attention.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from las.search.common import Heard, reads_are_free

# Stands in for log 0 inside running sums, which -inf would turn into NaN (-inf minus -inf).
IMPOSSIBLE = -1e4


class Prefixes(NamedTuple):
    """The CTC side of every row: its utterance's CTC output, and the prefix `g` so far."""

    x: torch.Tensor  # (frames, rows, vocabulary) log-probabilities, certain blanks past each row's end
    emission: torch.Tensor  # (frames, rows) the likeliest character (not blank) at each frame
    lengths: torch.Tensor  # (rows,) encoder frames
    forward: torch.Tensor  # (frames, 2, rows) log prob of `g` said by frame t, ending in a character (0) or blank (1)
    score: torch.Tensor  # (rows,) log prefix probability of `g`
    last: torch.Tensor  # (rows,) last character of `g`, -1 while `g` is empty
    length: torch.Tensor  # () characters in `g`, the same for every row (they advance in step)

    def select(self, rows: torch.Tensor) -> Prefixes:
        x, emission, forward = self.x[:, rows], self.emission[:, rows], self.forward[:, :, rows]
        return Prefixes(x, emission, self.lengths[rows], forward, self.score[rows], self.last[rows], self.length)


@dataclass(frozen=True)
class CTCPrefixScorer:
    """A scorer (las.search.scorers): log p(g + c...) - log p(g...) for every character c, and
    log p(exactly g) - log p(g...) for <eos>."""

    blank: int
    eos: int
    window_nats: float = 0.0  # 0: every frame

    def start(self, heard: Heard) -> Prefixes:
        assert heard.ctc_log_probs is not None  # Scoring.joint checks the model has a CTC head
        return self.initial(heard.ctc_log_probs, heard.memory.lengths)

    def initial(self, log_probs: torch.Tensor, lengths: torch.Tensor) -> Prefixes:
        """The empty prefix of rows with CTC log-probabilities `(rows, frames, vocabulary)`."""
        rows, frames, vocabulary = log_probs.shape
        past_end = torch.arange(frames, device=lengths.device)[None, :] >= lengths[:, None]  # (rows, frames)
        x = log_probs.float().masked_fill(past_end[:, :, None], float("-inf"))
        x[:, :, self.blank] = x[:, :, self.blank].masked_fill(past_end, 0.0)  # nothing changes past the end
        x = x.transpose(0, 1).contiguous()
        emission = x[:, :, torch.arange(vocabulary, device=x.device) != self.blank].max(dim=2).values
        forward = torch.full((frames, 2, rows), float("-inf"), device=x.device)
        forward[:, 1] = torch.cumsum(x[:, :, self.blank], dim=0)  # only blanks so far
        empty = torch.full((rows,), -1, dtype=torch.long, device=x.device)
        none = torch.zeros((), dtype=torch.long, device=x.device)  # on the device: a graph's step reads it
        return Prefixes(x, emission, lengths, forward, torch.zeros(rows, device=x.device), empty, none)

    def window(self, state: Prefixes, total: torch.Tensor, ended: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Which frames `(frames,)` may emit the next character, a run of them, given the log
        probability `total` `(frames, rows)` of `g` said by each frame and `ended` `(rows,)` of
        exactly `g`: not before frame len(g); with `window_nats`, only after frames where `g` is
        that close to the likeliest extension. And whether the first frame may (a bool tensor)."""
        frames = total.shape[0]
        open_at = torch.arange(frames, device=total.device) >= state.length.clamp(min=1)
        if self.window_nats <= 0 or frames < 2:
            return open_at, open_at[1] if frames > 1 else state.length == 0
        best = torch.maximum((total[:-1] + state.emission[1:]).max(dim=0).values, ended)  # (rows,) a bound
        near = ((total[:-1] >= best - self.window_nats) & torch.isfinite(best)).any(dim=1)  # (frames - 1,)
        # The frames after the first near frame, to the one after the last; none where none is near.
        first, last = near.int().argmax(), frames - 2 - near.flip(0).int().argmax()
        position = torch.arange(frames, device=total.device)
        inside = open_at & near.any() & (position > first) & (position <= last + 1)
        # Frame 0 only for the empty `g`, whose window opens at frame 1 unless nothing is near.
        return inside, open_at[1] & (near[0] | ~near.any())

    def score(self, state: Prefixes, tokens: torch.Tensor) -> tuple[torch.Tensor, tuple[Prefixes, torch.Tensor]]:
        """Increments `(rows, vocabulary)`, and what `advance` needs."""
        x, forward = state.x, state.forward
        frames, rows, vocabulary = x.shape
        total = torch.logaddexp(forward[:, 0], forward[:, 1])  # (frames, rows)
        ended = total[state.lengths - 1, torch.arange(rows, device=x.device)]  # exactly `g`
        inside, first_frame = self.window(state, total, ended)
        sliced = reads_are_free(x.device)
        if sliced:  # only the window's frames, a run: none of them is masked
            found = inside.nonzero()
            start, end = (int(found[0]), int(found[-1]) + 1) if len(found) else (1, 1)
        else:  # every frame, masked: where the window is would be a read (las.search.common.reads_are_free)
            start, end = 1, frames
        # Repeating the last character needs a blank in between: only blank-ending paths extend.
        repeat = (torch.arange(vocabulary, device=x.device)[None, :] == state.last[:, None])[None]
        said = torch.where(repeat, forward[start - 1 : end - 1, 1, :, None], total[start - 1 : end - 1, :, None])
        said = said + x[start:end]
        if not sliced:
            said = said.masked_fill(~inside[start:end, None, None], float("-inf"))
        prefix = said.logsumexp(dim=0) if end > start else x.new_full((rows, vocabulary), -torch.inf)
        # `c` as the very first symbol, at frame 0
        prefix = torch.logaddexp(prefix, torch.where(((state.last < 0) & first_frame)[:, None], x[0], float("-inf")))
        prefix[:, self.eos] = ended
        prefix[:, self.blank] = float("-inf")
        increments = prefix - state.score[:, None]
        return increments, (state, increments)

    def advance(self, scored: tuple[Prefixes, torch.Tensor], origin: torch.Tensor, tokens: torch.Tensor) -> Prefixes:
        """Each row's chosen `g + c`: row `origin[i]`'s prefix and `tokens[i]`. With a[t], b[t]
        the log probabilities of `g + c` said by frame t ending in `c` or a blank, and p[t] that of
        `g` said by t and ready for `c`: a[t] = logaddexp(a[t-1], p[t-1]) + x_c[t] and
        b[t] = logaddexp(a[t-1], b[t-1]) + x_blank[t]; unrolled with running sums C, B of x_c and
        x_blank, a[t] = C[t] + logcumsumexp(p[s-1] - C[s-1]), b[t] = B[t] + logcumsumexp(a[s-1] - B[s-1]),
        in float64 since the running sums grow with the frames."""
        state, increments = scored
        # Row `origin[i]` is of row i's utterance: x stays, the prefixes move.
        previous, last = state.forward[:, :, origin].double(), state.last[origin]
        total = torch.logaddexp(previous[:, 0], previous[:, 1])
        ready = torch.where(tokens == last, previous[:, 1], total)  # p: (frames, rows)
        emitted = state.x[:, torch.arange(len(tokens), device=tokens.device), tokens].double().clamp(min=IMPOSSIBLE)
        first = torch.where(last < 0, emitted[0], float("-inf"))  # a[0]: only if `g` is empty
        repeats, blanks = emitted[1:].cumsum(dim=0), state.x[1:, :, self.blank].double().cumsum(dim=0)  # C, B

        def before(sums: torch.Tensor) -> torch.Tensor:  # at t - 1, from frame 1 on
            return torch.nn.functional.pad(sums, (0, 0, 1, 0))[:-1]

        a = torch.cat([first[None], repeats + torch.logaddexp(first, (ready[:-1] - before(repeats)).logcumsumexp(0))])
        b = torch.cat([torch.full_like(first, -torch.inf)[None], blanks + (a[:-1] - before(blanks)).logcumsumexp(0)])
        score = state.score[origin] + increments[origin, tokens]
        forward = torch.stack([a, b], dim=1).float()
        return state._replace(forward=forward, score=score, last=tokens, length=state.length + 1)

    def keep(self, state: Prefixes, rows: torch.Tensor) -> Prefixes:
        return state.select(rows)
