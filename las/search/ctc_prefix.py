"""CTC prefix scores (Watanabe et al. 2017) for every next character of every hypothesis at once.

A beam search joined with CTC asks, per step, how likely each extended prefix `g + c` is under
the CTC head: the probability of all CTC paths whose collapsed output starts with `g + c`. That is
a sum over the frame t at which `c` is first emitted of P(`g` said by t - 1) x P(`c` at t), for
every row and character at once. The forward variables of a chosen `g + c` (ending in `c`, or in
a blank, at every frame) follow from those of `g` by a linear recurrence, which sums in closed
form: neither needs a loop over the frames.

The sum need not cover every frame. A path that emits `c` where `g` is `window_nats` less likely
than the likeliest emission of any next character (or the likeliest end) adds less than
e^-window_nats of the best extension's probability, so the sum runs over the window of frames
where `g` is likelier: a step's character scores cost the window, not the recording. The
forward variables, and with them every <eos> score, stay exact. (ESPnet windows around the
attention peak instead, which trusts the attention where it may have lost its place.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

# Stands in for log 0 inside running sums, which -inf would turn into NaN (-inf minus -inf).
IMPOSSIBLE = -1e4


class PrefixState(NamedTuple):
    forward: torch.Tensor  # (frames, 2, rows): log prob of `g` ending at frame t in a character (0) or blank (1)
    score: torch.Tensor  # (rows,) log prefix probability of `g`
    last: torch.Tensor  # (rows,) last character of `g`, -1 while `g` is empty
    length: int = 0  # characters in `g`, the same for every row (they advance in step)


@dataclass(frozen=True)
class CTCPrefixScorer:
    x: torch.Tensor  # (frames, rows, vocabulary) CTC log-probabilities, certain blanks past each row's end
    emission: torch.Tensor  # (frames, rows) the likeliest character (not blank) at each frame
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
        x = x.transpose(0, 1).contiguous()
        characters = torch.arange(x.shape[2], device=x.device) != blank
        return cls(x, x[:, :, characters].max(dim=2).values, lengths, blank, eos, window_nats)

    def select(self, rows: torch.Tensor) -> CTCPrefixScorer:
        """The scorer of `rows` only (beam search drops the rows of finished utterances)."""
        return CTCPrefixScorer(
            self.x[:, rows], self.emission[:, rows], self.lengths[rows], self.blank, self.eos, self.window_nats
        )

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
        `g + c` cannot end before frame len(g); with `window_nats`, `c` comes only after frames
        where `g` is within that many nats of the likeliest extension, in some row."""
        frames = total.shape[0]
        start = min(max(1, length), frames)
        if self.window_nats <= 0 or frames < 2:
            return start, frames
        rows = torch.arange(total.shape[1], device=total.device)
        # An upper bound of the likeliest single path of any `g + c` (c at frame t), or of `g` alone.
        best = torch.maximum((total[:-1] + self.emission[1:]).max(dim=0).values, total[self.lengths - 1, rows])
        said = ((total[:-1] >= best - self.window_nats) & torch.isfinite(best)).any(dim=1).nonzero().squeeze(1)
        if len(said) == 0:
            return start, start
        return max(start, int(said[0]) + 1), min(frames, int(said[-1]) + 2)

    def score(self, state: PrefixState) -> torch.Tensor:
        """Score increments `(rows, vocabulary)` of every `g + c`: log p(g + c...) - log p(g...),
        and for <eos> log p(exactly g) - log p(g...)."""
        x = self.x
        frames, rows, vocabulary = x.shape
        total = torch.logaddexp(state.forward[:, 0], state.forward[:, 1])  # (frames, rows)
        start, end = self.window(total, state.length)
        # Repeating the last character needs a blank in between: only blank-ending paths extend.
        repeat = torch.arange(vocabulary, device=x.device)[None, :] == state.last[:, None]  # (rows, vocabulary)
        before = torch.where(
            repeat[None], state.forward[start - 1 : end - 1, 1, :, None], total[start - 1 : end - 1, :, None]
        )  # (end - start, rows, vocabulary): `g` said by the frame before `c`
        prefix = (before + x[start:end]).logsumexp(dim=0) if end > start else x.new_full((rows, vocabulary), -torch.inf)
        if start == 1:  # `c` as the very first symbol, at frame 0
            prefix = torch.logaddexp(prefix, torch.where((state.last < 0)[:, None], x[0], float("-inf")))
        # Ending here: every path of the utterance collapses to exactly `g`.
        prefix[:, self.eos] = total[self.lengths - 1, torch.arange(rows, device=x.device)]
        prefix[:, self.blank] = float("-inf")
        return prefix - state.score[:, None]

    def select_extensions(
        self, increments: torch.Tensor, state: PrefixState, origin: torch.Tensor, tokens: torch.Tensor
    ) -> PrefixState:
        """The state of each row's chosen extension: hypothesis `origin[row]` followed by `tokens[row]`.

        With a[t], b[t] the log probabilities of `g + c` said by frame t ending in `c` or a blank,
        and p[t] that of `g` said by t ready for `c`: a[t] = logaddexp(a[t-1], p[t-1]) + x_c[t] and
        b[t] = logaddexp(a[t-1], b[t-1]) + x_blank[t]. Unrolled with running sums C, B of x_c,
        x_blank: a[t] = C[t] + logcumsumexp(p[s-1] - C[s-1]), b[t] = B[t] + logcumsumexp(a[s-1] - B[s-1]),
        in float64 since the running sums grow with the frames."""
        x = self.x  # row `origin[i]` is of the same utterance as row i: the same frames
        rows = len(origin)
        previous = state.forward[:, :, origin].double()  # (frames, 2, rows)
        total = torch.logaddexp(previous[:, 0], previous[:, 1])
        ready = torch.where(tokens == state.last[origin], previous[:, 1], total)  # p: (frames, rows)
        emitted = x[:, torch.arange(rows, device=x.device), tokens].double().clamp(min=IMPOSSIBLE)  # x_c
        blanks = x[:, :, self.blank].double()
        first = torch.where(state.last[origin] < 0, emitted[0], float("-inf"))  # a[0]: only if `g` is empty
        repeats, silences = emitted[1:].cumsum(dim=0), blanks[1:].cumsum(dim=0)  # C, B from frame 1
        shifted = lambda sums: torch.nn.functional.pad(sums, (0, 0, 1, 0))[:-1]  # noqa: E731  at t - 1
        character = repeats + torch.logaddexp(first, (ready[:-1] - shifted(repeats)).logcumsumexp(dim=0))
        a = torch.cat([first[None], character])  # (frames, rows)
        blank = silences + (a[:-1] - shifted(silences)).logcumsumexp(dim=0)
        b = torch.cat([torch.full_like(first, float("-inf"))[None], blank])
        forward = torch.stack([a, b], dim=1).float()
        return PrefixState(forward, state.score[origin] + increments[origin, tokens], tokens, state.length + 1)
