"""CTC prefix scores (Watanabe et al. 2017) for every next character of every hypothesis at once.

A beam search joined with CTC asks, per step, how likely each extended prefix `g + c` is under
the CTC head: the probability of all CTC paths whose collapsed output starts with `g + c`. The
forward variables of `g` (ending in a character, or in a blank, at every frame) give those of
every `g + c` in one pass over the frames, batched over hypotheses and characters.
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


@dataclass(frozen=True)
class CTCPrefixScorer:
    x: torch.Tensor  # (frames, rows, vocabulary) CTC log-probabilities, certain blanks past each row's end
    lengths: torch.Tensor  # (rows,) encoder frames
    blank: int
    eos: int

    @classmethod
    def from_log_probs(cls, log_probs: torch.Tensor, lengths: torch.Tensor, blank: int, eos: int) -> CTCPrefixScorer:
        # log_probs: (rows, frames, vocabulary); lengths: (rows,)
        frames = log_probs.shape[1]
        past_end = torch.arange(frames, device=lengths.device)[None, :] >= lengths[:, None]  # (rows, frames)
        # Past a row's end every frame is a certain blank, so nothing changes there.
        x = log_probs.float().masked_fill(past_end[:, :, None], float("-inf"))
        x[:, :, blank] = x[:, :, blank].masked_fill(past_end, 0.0)
        return cls(x.transpose(0, 1).contiguous(), lengths, blank, eos)

    def select(self, rows: torch.Tensor) -> CTCPrefixScorer:
        """The scorer of `rows` only (beam search drops the rows of finished utterances)."""
        return CTCPrefixScorer(self.x[:, rows], self.lengths[rows], self.blank, self.eos)

    def initial_state(self) -> PrefixState:
        frames, rows, _ = self.x.shape
        forward = torch.full((frames, 2, rows), float("-inf"), device=self.x.device)
        forward[:, 1] = torch.cumsum(self.x[:, :, self.blank], dim=0)  # only blanks so far
        zeros = torch.zeros(rows, device=self.x.device)
        return PrefixState(forward, zeros, torch.full((rows,), -1, dtype=torch.long, device=self.x.device))

    def score(self, state: PrefixState) -> tuple[torch.Tensor, torch.Tensor]:
        """Score increments `(rows, vocabulary)` of every `g + c`, and their forward variables
        `(frames, 2, rows, vocabulary)` for `select`."""
        x = self.x
        frames, rows, vocabulary = x.shape
        previous = state.forward
        total = torch.logaddexp(previous[:, 0], previous[:, 1])  # (frames, rows)
        # Repeating the last character needs a blank in between: only blank-ending paths extend.
        repeat = torch.arange(vocabulary, device=x.device)[None, :] == state.last[:, None]  # (rows, vocabulary)
        phi = torch.where(repeat[None], previous[:, 1, :, None], total[:, :, None])  # (frames, rows, vocabulary)
        forward = torch.full((frames, 2, rows, vocabulary), float("-inf"), device=x.device)
        empty = (state.last < 0)[:, None]
        forward[0, 0] = torch.where(empty, x[0], float("-inf"))
        prefix = forward[0, 0].clone()
        # `g + c` cannot end before frame len(g): the frames before it stay impossible (-inf),
        # so the loop starts there and a step costs the frames left, not all of them.
        for t in range(max(1, state.length), frames):
            forward[t, 0] = torch.logaddexp(forward[t - 1, 0], phi[t - 1]) + x[t]
            forward[t, 1] = torch.logaddexp(forward[t - 1, 0], forward[t - 1, 1]) + x[t, :, self.blank, None]
            prefix = torch.logaddexp(prefix, phi[t - 1] + x[t])
        # Ending here: every path of the utterance collapses to exactly `g`.
        prefix[:, self.eos] = total[self.lengths - 1, torch.arange(rows, device=x.device)]
        prefix[:, self.blank] = float("-inf")
        return prefix - state.score[:, None], forward

    @staticmethod
    def select_extensions(
        forward: torch.Tensor, increments: torch.Tensor, state: PrefixState, origin: torch.Tensor, tokens: torch.Tensor
    ) -> PrefixState:
        """The state of each row's chosen extension: hypothesis `origin[row]` followed by `tokens[row]`."""
        return PrefixState(
            forward[:, :, origin, tokens],
            state.score[origin] + increments[origin, tokens],
            tokens,
            state.length + 1,
        )
