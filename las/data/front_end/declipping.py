"""A recording made with its level set too hot, cut flat at full scale, given its peaks back.

A microphone or preamplifier driven past its range records every sample beyond full scale at
full scale: runs of identical samples at the recording's extremes, where speech peaks are
rounded. The flat tops spread energy over every band, and AN4 dev so recorded read 1.87x its
CER 10 dB over full scale and 3.48x 20 dB over. Nothing a model could learn from AN4 has them.
Each run is filled in from the waveform around it: a cubic fitted to the samples on both its
sides, which continues their slopes past the rail, as the peak went on. With the loudness
ceiling (`las.data.front_end.loudness`): 1.49x and 2.48x (3 seeds; docs/archive/experiments.md, "A microphone set
too hot, heard as if it had not been").
"""

from __future__ import annotations

import torch

from las.data.front_end.runs import run_bounds

MIN_RUNS = 10  # runs of 2 or more samples at an extreme that mark a recording as clipped
# ... an extreme this far from zero at least (-36 dBFS): a quiet recording's few quantiser steps
# repeat at its peaks, and digital silence is a run of zeros.
MIN_RAIL = 2**-6
NEIGHBOURS = 4  # samples each side of a run that the cubic is fitted to
HEADROOM = 4.0  # a filled peak reaches at most this many times the rail (12 dB)
RIDGE = 1e-6  # keeps a fit through few samples solvable


def clipped_runs(waveform: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(runs,)` starts and ends of the runs of 2 or more samples of `waveform` `(samples,)` at
    its highest or its lowest value, where there are MIN_RUNS or more of them; none otherwise.
    Unclipped speech reaches its extremes at a sample or two of its loudest peaks (no recording
    of AN4 train or dev has a run of two there); a clipped one at every peak above the rail
    (AN4 dev 10 dB over full scale: 28,000 runs in 100 recordings)."""
    none = torch.zeros(0, dtype=torch.long)
    if len(waveform) < 2:
        return none, none
    starts, ends = [none], [none]
    for extreme in (waveform.max(), waveform.min()):
        if extreme.abs() < MIN_RAIL:
            continue
        first, last = run_bounds(waveform == extreme)
        long = last - first >= 2
        starts.append(first[long])
        ends.append(last[long])
    start, end = torch.cat(starts), torch.cat(ends)
    return (start, end) if len(start) >= MIN_RUNS else (none, none)


def clipped_share(waveform: torch.Tensor) -> float:
    """The share of `waveform`'s `(samples,)` samples that lie in clipped runs (`clipped_runs`): 0
    for a recording that is not clipped. Told to the user, since declipping gives back only part
    of what the rail took (1.49x and 2.48x AN4 dev's CER 10 and 20 dB over full scale)."""
    starts, ends = clipped_runs(waveform)
    return float((ends - starts).sum()) / len(waveform) if len(starts) else 0.0


def declipped(waveform: torch.Tensor) -> torch.Tensor:
    """`waveform` `(samples,)` with each clipped run (`clipped_runs`) filled by a cubic fitted to
    NEIGHBOURS samples on each side of it that are not clipped, kept beyond the rail and within
    HEADROOM of it; the waveform itself where it is not clipped."""
    starts, ends = clipped_runs(waveform)
    if not len(starts):
        return waveform
    samples, lengths = len(waveform), ends - starts
    run_of = torch.repeat_interleave(torch.arange(len(starts)), lengths)  # (clipped samples,) its run
    inside = torch.arange(len(run_of)) - (lengths.cumsum(0) - lengths)[run_of]  # offset from its start
    where = starts[run_of] + inside  # (clipped samples,)
    clipped = torch.zeros(samples, dtype=torch.bool)
    clipped[where] = True
    # Each run's neighbours: NEIGHBOURS before its start and from its end, at offsets from its start.
    side = torch.arange(NEIGHBOURS)
    before = (side - NEIGHBOURS).expand(len(starts), NEIGHBOURS)
    offsets = torch.cat([before, lengths[:, None] + side], dim=1)  # (runs, 2 * NEIGHBOURS)
    positions = starts[:, None] + offsets
    usable = (positions >= 0) & (positions < samples)
    positions = positions.clamp(0, samples - 1)
    usable &= ~clipped[positions]
    # A run between others (where even noise was driven to both rails) has too few samples
    # around it to continue: it stays at the rail.
    fitted = (usable[:, :NEIGHBOURS].sum(dim=1) >= 2) & (usable[:, NEIGHBOURS:].sum(dim=1) >= 2)
    scale = (lengths[:, None] + 1).double()  # offsets in units of the run's span: a well-conditioned fit
    powers = (offsets.double() / scale)[..., None] ** torch.arange(4, dtype=torch.float64)  # (runs, 2K, 4)
    weights = usable.double()[..., None]
    normal = (powers * weights).transpose(1, 2) @ powers + RIDGE * torch.eye(4, dtype=torch.float64)
    right = (powers * weights).transpose(1, 2) @ waveform.double()[positions][..., None]
    cubic = torch.linalg.solve(normal, right)[..., 0]  # (runs, 4)
    at = (inside.double() / scale[run_of, 0])[:, None] ** torch.arange(4, dtype=torch.float64)
    filled = (at * cubic[run_of]).sum(dim=1)  # (clipped samples,)
    rail = waveform.double()[starts[run_of]]
    filled = torch.where(rail > 0, filled.clamp(rail, HEADROOM * rail), filled.clamp(HEADROOM * rail, rail))
    filled = torch.where(fitted[run_of], filled, rail)
    result = waveform.clone()
    result[where] = filled.to(waveform.dtype)
    return result
