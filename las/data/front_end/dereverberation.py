"""Dereverberation by weighted prediction error (WPE; Nakatani et al. 2010, Yoshioka and Nakatani
2012), single channel. In each frequency band of the STFT, the late reverberation of a frame is
predicted linearly from the frames `delay` and more before it, and subtracted; the filter
minimises the residual weighted by the inverse of the dry signal's power, which is re-estimated
from the residual a few times. The direct sound and early reflections (within `delay` frames) are
kept: they colour the sound, but do not smear it over the next words.

A recording that the filter hardly changes (under `minimum_gain_db` of its energy above mains
hum's bands removed) is left exactly as it was: on dry speech, telephone audio or noise, the
filter only fits noise; so is one too short for the filter to learn from (`FRAMES_PER_TAP`). The
front end calls it only for recordings that hold speech (las.data.front_end.features; docs/archive/experiments.md,
"Reverberation: dereverberation at decoding")."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

# Weights never exceed 1 / (this share of the loudest band-frame's power): digital silence and
# empty bands would otherwise get infinite weight.
POWER_FLOOR = 1e-6
# A filter of k taps fits k frames of anything: with too few frames per tap it takes away speech,
# not reverberation (a word of 0.3 s came back as noise). A block gets a tap per this many of its
# frames, up to `taps`, and none under MINIMUM_TAPS.
FRAMES_PER_TAP = 5
MINIMUM_TAPS = 5
# The gate reads the bands above mains hum (50 or 60 Hz and its first harmonics): a hum is all
# predictable from its past, so WPE takes it away from dry speech too, and counted, it opened the
# gate for half of AN4 dev's recordings with hum around them (1.15x their CER; none of them above
# this, every reverberant one still).
HUM_HZ = 300.0
BLOCK_SECONDS = 30.0  # a long recording is filtered 30 s at a time: memory follows the block
CHUNK_FRAMES = 2048  # correlations summed over this many frames at a time: memory follows the chunk


@dataclass(frozen=True)
class Dereverberation:
    """Settings of single-channel WPE. At 16 kHz: 32 ms windows every 16 ms; the prediction
    reaches from 32 ms to 352 ms back, the late tail of rooms of RT60 0.3-0.8 s."""

    sample_rate: int = 16000
    window_seconds: float = 0.032
    hop_seconds: float = 0.016
    taps: int = 20
    delay: int = 2
    iterations: int = 3
    minimum_gain_db: float = 0.3

    def __call__(self, waveform: torch.Tensor) -> torch.Tensor:
        """`(samples,)` float -> `(samples,)`, the late reverberation removed, block by block. Each
        block is filtered with the audio before it as its past, and keeps only its own samples."""
        block = round(BLOCK_SECONDS * self.sample_rate)
        if len(waveform) <= block:
            return self.filtered(waveform)
        hop, window = self.sizes()
        lead = (self.delay + self.taps + 1) * hop + window  # enough past for its first frame
        pieces = []
        for start in range(0, len(waveform), block):
            first = max(0, start - lead)
            pieces.append(self.filtered(waveform[first : start + block])[start - first :])
        return torch.cat(pieces)

    def sizes(self) -> tuple[int, int]:
        """(hop, window) in samples."""
        return round(self.hop_seconds * self.sample_rate), round(self.window_seconds * self.sample_rate)

    def filtered(self, waveform: torch.Tensor) -> torch.Tensor:
        """One block: the dereverberated waveform, or `waveform` itself where WPE removes less
        than `minimum_gain_db` of its energy above HUM_HZ, after its first iteration (which
        spares dry audio the others) or its last; or where it is too short for the filter
        (`FRAMES_PER_TAP`)."""
        hop, size = self.sizes()
        if len(waveform) < size:
            return waveform
        window = torch.hann_window(size, dtype=waveform.dtype)
        spectrum = torch.stft(waveform, size, hop, window=window, return_complex=True)  # (bins, frames)
        taps = min(self.taps, spectrum.shape[1] // FRAMES_PER_TAP)
        loudest = float(spectrum.abs().square().max())
        if taps < MINIMUM_TAPS or loudest == 0.0:
            return waveform
        above_hum = math.ceil(HUM_HZ * size / self.sample_rate)  # the first band the gate reads
        energy = float(spectrum[above_hum:].abs().square().sum())
        estimate = spectrum
        for iteration in range(self.iterations):
            estimate = self.predicted_away(spectrum, estimate, taps, loudest)
            if iteration in (0, self.iterations - 1):
                after = float(estimate[above_hum:].abs().square().sum())
                if not after > 0 or 10 * math.log10(energy / after) < self.minimum_gain_db:
                    return waveform
        return torch.istft(estimate, size, hop, window=window, length=len(waveform))

    def predicted_away(self, spectrum: torch.Tensor, estimate: torch.Tensor, taps: int, loudest: float) -> torch.Tensor:
        """One iteration: `spectrum` `(bins, frames)` complex, each frame less its prediction from
        `taps` frames of its past, by the filter weighted by the power of the last `estimate`."""
        bins = spectrum.shape[0]
        weight = 1.0 / estimate.abs().square().clamp_min(POWER_FLOOR * loudest)  # (bins, frames)
        correlation = spectrum.new_zeros(bins, taps, taps)
        cross = spectrum.new_zeros(bins, taps, 1)
        for frames, past in self.pasts(spectrum, taps):
            weighted = (past * weight[:, frames, None]).transpose(1, 2)  # (bins, taps, chunk)
            correlation += weighted @ past.conj()
            cross += weighted @ spectrum[:, frames, None].conj()
        # A diagonal load a millionth of the mean power keeps bands without energy solvable.
        load = 1e-6 * correlation.diagonal(dim1=1, dim2=2).real.mean(dim=1).clamp_min(1e-30)
        correlation += load[:, None, None] * torch.eye(taps, dtype=correlation.dtype)
        filters = torch.linalg.solve(correlation, cross).conj()  # (bins, taps, 1)
        return torch.cat(
            [spectrum[:, frames] - (past @ filters)[..., 0] for frames, past in self.pasts(spectrum, taps)], dim=1
        )

    def pasts(self, spectrum: torch.Tensor, taps: int) -> Iterator[tuple[slice, torch.Tensor]]:
        """Per chunk of `spectrum`'s frames: their slice, and their past `(bins, chunk, taps)`,
        where past[b, t, k] is frame `t - delay - k` of band b (zero before the first frame)."""
        reach = self.delay + taps - 1
        padded = torch.nn.functional.pad(spectrum, (reach, 0))  # padded[:, t + reach] is frame t
        total = spectrum.shape[1]
        for start in range(0, total, CHUNK_FRAMES):
            frames = slice(start, min(total, start + CHUNK_FRAMES))
            shifts = [reach - self.delay - k for k in range(taps)]
            yield (
                frames,
                torch.stack([padded[:, frames.start + shift : frames.stop + shift] for shift in shifts], dim=-1),
            )
