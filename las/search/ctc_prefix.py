"""CTC prefix scores (Watanabe et al. 2017) for every next character of every hypothesis at once.

A beam search joined with CTC asks, per step, how likely each extended prefix `g + c` is under
the CTC head: the probability of all CTC paths whose collapsed output starts with `g + c`. The
forward variables of `g` (ending in a character, or in a blank, at every frame) give those of
every `g + c` in one pass over the frames, batched over hypotheses and characters.

That pass need not cover every frame. `g + c` can only begin where `g` has been said: where the
probability of `g` is negligible (`window_nats` below its peak), no path worth counting begins,
so the pass covers only the window where it is not, and the frames after it are filled in
closed form for the chosen extensions alone (after the window only blanks and repeats follow).
A step then costs the width of the window, not the length of the recording (ESPnet windows
around the attention peak instead, which can lose the CTC's own alignment).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch


class PrefixState(NamedTuple):
    forward: torch.Tensor  # (frames, 2, rows): log prob of `g` ending at frame t in a character (0) or blank (1)
    score: torch.Tensor  # (rows,) log prefix probability of `g`
    last: torch.Tensor  # (rows,) last character of `g`, -1 while `g` is empty
    length: int = 0  # characters in `g`, the same for every row (they advance in step)


class Extensions(NamedTuple):
    """The forward variables of every `g + c`, over the frames of the window only."""

    forward: torch.Tensor  # (end - low, 2, rows, vocabulary)
    low: int  # the frame before the first at which `c` may be emitted (nothing before it)


@dataclass(frozen=True)
class CTCPrefixScorer:
    x: torch.Tensor  # (frames, rows, vocabulary) CTC log-probabilities, certain blanks past each row's end
    lengths: torch.Tensor  # (rows,) encoder frames
    blank: int
    eos: int
    window_nats: float = 0.0  # 0: every frame

    @classmethod
    def from_log_probs(
        cls, log_probs: torch.Tensor, lengths: torch.Tensor, blank: int, eos: int, window_nats: float = 0.0
    ) -> CTCPrefixScorer:
        # log_probs: (rows, frames, vocabulary); lengths: (rows,)
        frames = log_probs.shape[1]
        past_end = torch.arange(frames, device=lengths.device)[None, :] >= lengths[:, None]  # (rows, frames)
        # Past a row's end every frame is a certain blank, so nothing changes there.
        x = log_probs.float().masked_fill(past_end[:, :, None], float("-inf"))
        x[:, :, blank] = x[:, :, blank].masked_fill(past_end, 0.0)
        return cls(x.transpose(0, 1).contiguous(), lengths, blank, eos, window_nats)

    def select(self, rows: torch.Tensor) -> CTCPrefixScorer:
        """The scorer of `rows` only (beam search drops the rows of finished utterances)."""
        return CTCPrefixScorer(self.x[:, rows], self.lengths[rows], self.blank, self.eos, self.window_nats)

    @staticmethod
    def select_state(state: PrefixState, rows: torch.Tensor) -> PrefixState:
        """The prefixes of `rows` only."""
        return state._replace(forward=state.forward[:, :, rows], score=state.score[rows], last=state.last[rows])

    def initial_state(self) -> PrefixState:
        frames, rows, _ = self.x.shape
        forward = torch.full((frames, 2, rows), float("-inf"), device=self.x.device)
        forward[:, 1] = torch.cumsum(self.x[:, :, self.blank], dim=0)  # only blanks so far
        zeros = torch.zeros(rows, device=self.x.device)
        return PrefixState(forward, zeros, torch.full((rows,), -1, dtype=torch.long, device=self.x.device))

    def window(self, total: torch.Tensor, length: int) -> tuple[int, int]:
        """Frames [start, end) at which a next character may be emitted, given the log
        probability `total` `(frames, rows)` of each row's `g` having been said by each frame.
        `g + c` cannot end before frame len(g); with `window_nats`, c comes only after a frame
        where `g` is within that many nats of its likeliest in some row."""
        frames = total.shape[0]
        start = min(max(1, length), frames)
        if self.window_nats <= 0:
            return start, frames
        peak = total.max(dim=0).values  # (rows,)
        said = ((total >= peak - self.window_nats) & torch.isfinite(peak)).any(dim=1).nonzero().squeeze(1)
        if len(said) == 0:
            return start, start
        return max(start, int(said[0]) + 1), min(frames, int(said[-1]) + 2)

    def score(self, state: PrefixState) -> tuple[torch.Tensor, Extensions]:
        """Score increments `(rows, vocabulary)` of every `g + c`, and their forward variables
        over the window, for `select_extensions`."""
        x = self.x
        frames, rows, vocabulary = x.shape
        previous = state.forward
        total = torch.logaddexp(previous[:, 0], previous[:, 1])  # (frames, rows)
        start, end = self.window(total, state.length)
        low = start - 1
        # Repeating the last character needs a blank in between: only blank-ending paths extend.
        repeat = torch.arange(vocabulary, device=x.device)[None, :] == state.last[:, None]  # (rows, vocabulary)
        phi = torch.where(repeat[None], previous[low:, 1, :, None], total[low:, :, None])  # (frames - low, rows, V)
        forward = torch.full((max(end, start) - low, 2, rows, vocabulary), float("-inf"), device=x.device)
        if low == 0:  # the first frame can only begin `c` if `g` is empty
            forward[0, 0] = torch.where((state.last < 0)[:, None], x[0], float("-inf"))
        prefix = forward[0, 0].clone()
        for t in range(start, end):
            i = t - low
            forward[i, 0] = torch.logaddexp(forward[i - 1, 0], phi[i - 1]) + x[t]
            forward[i, 1] = torch.logaddexp(forward[i - 1, 0], forward[i - 1, 1]) + x[t, :, self.blank, None]
            prefix = torch.logaddexp(prefix, phi[i - 1] + x[t])
        # Ending here: every path of the utterance collapses to exactly `g`.
        prefix[:, self.eos] = total[self.lengths - 1, torch.arange(rows, device=x.device)]
        prefix[:, self.blank] = float("-inf")
        return prefix - state.score[:, None], Extensions(forward, low)

    def select_extensions(
        self,
        extensions: Extensions,
        increments: torch.Tensor,
        state: PrefixState,
        origin: torch.Tensor,
        tokens: torch.Tensor,
    ) -> PrefixState:
        """The state of each row's chosen extension: hypothesis `origin[row]` followed by `tokens[row]`."""
        frames, rows = self.x.shape[0], len(origin)
        low, end = extensions.low, extensions.low + extensions.forward.shape[0]
        forward = torch.full((frames, 2, rows), float("-inf"), device=self.x.device)
        forward[low:end] = extensions.forward[:, :, origin, tokens]
        if end < frames:
            forward[end:] = self.after_window(forward[end - 1], tokens, end)
        return PrefixState(forward, state.score[origin] + increments[origin, tokens], tokens, state.length + 1)

    def after_window(self, last: torch.Tensor, tokens: torch.Tensor, end: int) -> torch.Tensor:
        """Forward variables `(frames - end, 2, rows)` of `g + c` after the window, where `c` is
        `tokens` and `last` `(2, rows)` those at frame end - 1: from there only repeats of `c`
        (a[t] = a[t-1] + x_c[t]) and blanks (b[t] = logaddexp(a[t-1], b[t-1]) + x_blank[t])
        follow, which sum in closed form. float64: the running sums grow with the frames."""
        rows = torch.arange(len(tokens), device=tokens.device)
        repeats = self.x[end:, rows, tokens].double().cumsum(dim=0)  # (frames - end, rows)
        blanks = self.x[end:, :, self.blank].double().cumsum(dim=0)
        character, blank = last.double()
        before = torch.nn.functional.pad(repeats - blanks, (0, 0, 1, 0))[:-1]  # (frames - end, rows): at t - 1
        ended = character + before.logcumsumexp(dim=0)  # paths that left `c` for blanks by each frame
        return torch.stack([character + repeats, blanks + torch.logaddexp(blank, ended)], dim=1).float()
