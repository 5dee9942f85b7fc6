"""CTC greedy decoding: the best symbol per encoder frame, repeats merged, blanks dropped.

It reads only the listener and its CTC head, which makes it the yardstick for how much the
attention speller adds (and a fast decoder in its own right)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.search.common import Hypothesis, Symbols


@dataclass(frozen=True)
class CTCGreedySearch:
    symbols: Symbols

    @torch.no_grad()
    def search(self, model: LAS, memory: ListenerOutput) -> list[list[Hypothesis]]:
        log_probs = model.ctc_head(memory.hidden).float().log_softmax(-1)  # (batch, frames, vocabulary)
        scores, best = log_probs.max(dim=-1)  # (batch, frames): the most likely path
        hypotheses = []
        for row, length in enumerate(memory.lengths.tolist()):
            path = best[row, :length].tolist()
            tokens = [
                symbol
                for frame, symbol in enumerate(path)
                if symbol != self.symbols.blank
                and (frame == 0 or symbol != path[frame - 1])
                and symbol not in self.symbols.forbidden
                and symbol != self.symbols.eos
            ]
            hypotheses.append([Hypothesis(tokens, scores[row, :length].sum().item(), None)])
        return hypotheses
