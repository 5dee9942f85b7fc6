"""Runs of True in a sequence of flags: where each starts and ends."""

from __future__ import annotations

import torch


def run_bounds(flags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(runs,)` starts and `(runs,)` ends (one past the last) of each run of True in `flags` `(n,)`."""
    changes = torch.diff(torch.nn.functional.pad(flags.to(torch.int8), (1, 1))).nonzero().flatten()
    return changes[0::2], changes[1::2]  # alternately starts and ends of runs


def leading(flags: torch.Tensor) -> int:
    """How many of the flags `(samples,)` are True before the first False."""
    false = (~flags).nonzero()
    return int(false[0]) if len(false) else len(flags)


def long_runs(flags: torch.Tensor, length: int) -> torch.Tensor:
    """`(samples,)` True inside the runs of True in `flags` `(samples,)` `length` or longer."""
    starts, ends = run_bounds(flags)
    long = ends - starts >= length
    edges = torch.zeros(len(flags) + 1, dtype=torch.int32)
    edges.index_add_(0, starts[long], torch.ones(int(long.sum()), dtype=torch.int32))
    edges.index_add_(0, ends[long], -torch.ones(int(long.sum()), dtype=torch.int32))
    return edges.cumsum(0)[:-1] > 0
