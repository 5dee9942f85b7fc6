"""Checkpoint averaging (ESPnet's `average_nbest`): the weights of the epochs with the lowest dev
CER, averaged element-wise into one model. Late epochs of one run sit around the same minimum;
their mean lies nearer its centre than any one of them, and usually decodes better."""

from __future__ import annotations

from pathlib import Path

import torch

from las.core.files import save_atomically
from las.core.progress import warn

Snapshot = tuple[float, int]  # (dev CER, epoch)


def snapshot_path(out: Path, epoch: int) -> Path:
    return out / "snapshots" / f"epoch_{epoch:03d}.pt"


def rank_snapshots(kept: list[Snapshot], candidate: Snapshot, count: int) -> tuple[list[Snapshot], list[Snapshot]]:
    """The `count` best of `kept` plus `candidate` (lowest CER; of equals, the later epoch), and the rest."""
    ranked = sorted([*kept, candidate], key=lambda snapshot: (snapshot[0], -snapshot[1]))
    return ranked[:count], ranked[count:]


def keep_snapshot(
    out: Path, state: dict[str, torch.Tensor], kept: list[Snapshot], candidate: Snapshot, count: int
) -> tuple[list[Snapshot], list[Snapshot]]:
    """Save `state` as `candidate`'s snapshot if it is among the `count` best; the snapshots kept,
    and those that fell out (to delete once the checkpoint listing the kept ones is saved)."""
    kept, dropped = rank_snapshots(kept, candidate, count)
    if candidate in kept:
        path = snapshot_path(out, candidate[1])
        path.parent.mkdir(exist_ok=True)
        save_atomically(path, state)
    # Not this epoch's file, whatever the CER it was listed with: it now holds this state.
    return kept, [snapshot for snapshot in dropped if snapshot[1] != candidate[1]]


def load_snapshots(out: Path, epochs: list[int]) -> dict[int, dict[str, torch.Tensor]]:
    """The weights of those `epochs` whose snapshot can be read, by epoch; a snapshot deleted,
    damaged, or left behind when a run was copied is named in a warning and left out."""
    states = {}
    for epoch in epochs:
        path = snapshot_path(out, epoch)
        try:
            states[epoch] = torch.load(path, weights_only=True)
        except Exception as error:  # torch.load fails on missing, foreign or damaged files in many ways
            warn(f"{path}: cannot be read ({type(error).__name__}); averaged without it")
    return states


def average_states(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Element-wise mean of floating-point tensors (summed in float64); other tensors from the first."""
    if not states:
        raise ValueError("no states to average")
    averaged = {}
    for name, first in states[0].items():
        if first.is_floating_point():
            total = sum(state[name].double() for state in states)
            averaged[name] = (total / len(states)).to(first.dtype)
        else:
            averaged[name] = first.clone()
    return averaged
