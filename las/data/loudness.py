"""The level a recording is analysed at: inside the levels that training has heard.

Log-mel power has an absolute floor, and each utterance's mean is taken away only in part (its
prior, `Normalizer`), so a recording's level reaches the model at its extremes. The quietest AN4
training recording peaks at -23 dBFS (the median at -11), and its loudest speech stays under
-11.9 dB (each recording's 99th percentile of 10 ms frame power; the median -21.5). Recordings
outside those levels are brought inside them before analysis.
"""

from __future__ import annotations

import math

import torch

# Raised to -20 dBFS where the peak is lower. Brought only to -30 dBFS, speech 30-40 dB down read
# 1.3x worse: its soft sounds near the floor.
QUIET_PEAK = 10 ** (-20 / 20)
# Lowered to -11 dB where the loud frames are louder, which no AN4 training recording is: AN4 dev
# 20 dB louder (in floating point, nothing clipped) read 1.24x its CER, and a recording cut flat
# at full scale is louder still for its level (`las.data.declipping`).
LOUD_POWER = 10 ** (-11 / 10)
LOUD_QUANTILE = 0.99  # the loud frames: speech for 1% of a recording is enough to be heard


def within_training_levels(waveform: torch.Tensor, frame: int) -> torch.Tensor:
    """`waveform` `(samples,)` raised to QUIET_PEAK where it peaks lower, or lowered to
    LOUD_POWER where its loud frames of `frame` samples (`loud_power`) are louder; else as it is."""
    peak = float(waveform.abs().max()) if len(waveform) else 0.0
    if 0 < peak < QUIET_PEAK:
        return waveform * (QUIET_PEAK / peak)
    loud = loud_power(waveform, frame)
    if loud > LOUD_POWER:
        return waveform * math.sqrt(LOUD_POWER / loud)
    return waveform


def loud_power(waveform: torch.Tensor, frame: int) -> float:
    """The LOUD_QUANTILE of the mean power of `waveform`'s `(samples,)` frames of `frame` samples
    (0 for less than a frame)."""
    frames = waveform[: len(waveform) // frame * frame].double().reshape(-1, frame)  # (frames, frame)
    if not len(frames):
        return 0.0
    return float(torch.quantile(frames.pow(2).mean(dim=1), LOUD_QUANTILE))
