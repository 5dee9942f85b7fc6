"""Runs of True in a sequence of flags: where each starts and ends."""

from __future__ import annotations

import torch


def run_bounds(flags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(runs,)` starts and `(runs,)` ends (one past the last) of each run of True in `flags` `(n,)`."""
    changes = torch.diff(torch.nn.functional.pad(flags.to(torch.int8), (1, 1))).nonzero().flatten()
    return changes[0::2], changes[1::2]  # alternately starts and ends of runs
