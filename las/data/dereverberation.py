"""Dereverberation by weighted prediction error (WPE; Nakatani et al. 2010, Yoshioka and Nakatani
2012), single channel. In each frequency band of the STFT, the late reverberation of a frame is
predicted linearly from the frames `delay` and more before it, and subtracted; the filter
minimises the residual weighted by the inverse of the dry signal's power, which is re-estimated
from the residual a few times. The direct sound and early reflections (within `delay` frames) are
kept: they colour the sound, but do not smear it over the next words.

A recording that the filter hardly changes (under `minimum_gain_db` of its energy removed) is
left exactly as it was: on dry speech, telephone audio or noise, the filter only fits noise
(docs/BENCHMARKS.md, "Reverberation at decoding")."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

# Weights never exceed 1 / (this share of the loudest band-frame's power): digital silence and
# empty bands would otherwise get infinite weight.
POWER_FLOOR = 1e-6
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
        than `minimum_gain_db` of its energy (or it is shorter than a window)."""
        hop, size = self.sizes()
        if len(waveform) < size:
            return waveform
        window = torch.hann_window(size, dtype=waveform.dtype)
        spectrum = torch.stft(waveform, size, hop, window=window, return_complex=True)  # (bins, frames)
        dry = torch.istft(self.predicted_away(spectrum), size, hop, window=window, length=len(waveform))
        before, after = float(waveform.square().sum()), float(dry.square().sum())
        if not after > 0 or 10 * math.log10(before / after) < self.minimum_gain_db:
            return waveform
        return dry

    def predicted_away(self, spectrum: torch.Tensor) -> torch.Tensor:
        """`(bins, frames)` complex -> the same, each frame less its prediction from its past."""
        loudest = float(spectrum.abs().square().max()) if spectrum.numel() else 0.0
        if loudest == 0.0:
            return spectrum
        bins = spectrum.shape[0]
        estimate = spectrum
        for _ in range(self.iterations):
            weight = 1.0 / estimate.abs().square().clamp_min(POWER_FLOOR * loudest)  # (bins, frames)
            correlation = spectrum.new_zeros(bins, self.taps, self.taps)
            cross = spectrum.new_zeros(bins, self.taps, 1)
            for frames, past in self.pasts(spectrum):
                weighted = (past * weight[:, frames, None]).transpose(1, 2)  # (bins, taps, chunk)
                correlation += weighted @ past.conj()
                cross += weighted @ spectrum[:, frames, None].conj()
            # A diagonal load a millionth of the mean power keeps bands without energy solvable.
            load = 1e-6 * correlation.diagonal(dim1=1, dim2=2).real.mean(dim=1).clamp_min(1e-30)
            correlation += load[:, None, None] * torch.eye(self.taps, dtype=correlation.dtype)
            filters = torch.linalg.solve(correlation, cross).conj()  # (bins, taps, 1)
            estimate = torch.cat(
                [spectrum[:, frames] - (past @ filters)[..., 0] for frames, past in self.pasts(spectrum)], dim=1
            )
        return estimate

    def pasts(self, spectrum: torch.Tensor) -> Iterator[tuple[slice, torch.Tensor]]:
        """Per chunk of `spectrum`'s frames: their slice, and their past `(bins, chunk, taps)`,
        where past[b, t, k] is frame `t - delay - k` of band b (zero before the first frame)."""
        reach = self.delay + self.taps - 1
        padded = torch.nn.functional.pad(spectrum, (reach, 0))  # padded[:, t + reach] is frame t
        total = spectrum.shape[1]
        for start in range(0, total, CHUNK_FRAMES):
            frames = slice(start, min(total, start + CHUNK_FRAMES))
            shifts = [reach - self.delay - k for k in range(self.taps)]
            yield (
                frames,
                torch.stack([padded[:, frames.start + shift : frames.stop + shift] for shift in shifts], dim=-1),
            )
