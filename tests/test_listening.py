"""scripts/listening.py: whether a speller reads its listener, from its loss with another
utterance's memory."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from las.model.listener import ListenerOutput
from scripts.listening import losses, rotated


def test_rotation_gives_each_row_the_next_rows_whole_memory() -> None:
    lengths = torch.tensor([3, 1, 2])
    mask = torch.arange(3)[None, :] < lengths[:, None]  # (batch, frames)
    frames = torch.arange(3.0)[:, None, None].expand(3, 3, 4)  # row i is all i
    memory = ListenerOutput(frames, frames + 10, mask, lengths, frames + 20)
    moved = rotated(memory)
    assert moved.lengths.tolist() == [1, 2, 3]
    assert torch.equal(moved.mask, mask[[1, 2, 0]])
    for field, offset in zip((moved.keys, moved.values, moved.hidden), (0, 10, 20), strict=True):
        assert field[:, 0, 0].tolist() == [1 + offset, 2 + offset, 0 + offset]


def test_a_trained_speller_loses_more_with_another_utterances_memory(trained_run: dict[str, Path]) -> None:
    own, other = losses(trained_run["run"] / "best.pt", trained_run["train"], batch_size=4)
    assert math.isfinite(own) and math.isfinite(other)
    assert own < other
