"""The level a recording is analysed at: inside the levels that training has heard.

Log-mel power has an absolute floor, and each utterance's mean is taken away only in part (the
normaliser's prior counts the corpus's average frame as 0.3 s of its own), so a recording's
level reaches the model at its extremes. The quietest AN4 training recording peaks at -23 dBFS
(the median at -11), and no training recording's frames are louder than -33.9 dB on average (10
ms frames' log power; the median -43.6). Recordings outside those levels are brought inside them
before analysis.
"""

from __future__ import annotations

import torch

# Lowered to -33 dB where the frames are louder on average: AN4 dev 20 dB louder (in floating
# point, nothing clipped) read 1.24x its CER; speech through a phone's automatic gain or a
# broadcast compressor, and a recording cut flat at full scale (`las.data.front_end.declipping`), are
# louder than any AN4 recording throughout.
LOUD_LEVEL_DB = -33.0


def within_training_levels(waveform: torch.Tensor, frame: int, quiet_peak_dbfs: float) -> torch.Tensor:
    """`waveform` `(samples,)` raised to peak at `quiet_peak_dbfs` where it peaks lower
    (`features.quiet_peak_dbfs`), or lowered to LOUD_LEVEL_DB where its frames of `frame` samples
    are louder on average (`mean_level_db`); else as it is."""
    quiet_peak = 10 ** (quiet_peak_dbfs / 20)
    peak = float(waveform.abs().max()) if len(waveform) else 0.0
    if 0 < peak < quiet_peak:
        return waveform * (quiet_peak / peak)
    excess = mean_level_db(waveform, frame) - LOUD_LEVEL_DB
    if excess > 0:
        return waveform * 10 ** (-excess / 20)
    return waveform


def mean_level_db(waveform: torch.Tensor, frame: int) -> float:
    """The mean over `waveform`'s `(samples,)` frames of `frame` samples of their power in dB:
    the level an utterance's mean log-mel power reads. Frames of digital silence do not count
    (padding is not a quiet recording); -inf where every frame is silent or there is none."""
    frames = waveform[: len(waveform) // frame * frame].double().reshape(-1, frame)  # (frames, frame)
    power = frames.pow(2).mean(dim=1)
    power = power[power > 0]
    return float(10 * power.log10().mean()) if len(power) else -float("inf")
