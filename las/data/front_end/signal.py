"""The signal processing of the front end, in torch alone: band-limited resampling, the power mel
spectrum, biquad filters and mu-law companding.

las once took these from torchaudio, whose compiled library is built for one torch release at a
time and is no longer released in step with torch (pytorch/audio#3902): it held every user to
one torch. Each function here computes what its torchaudio counterpart computed, by the same
arithmetic in the same order where that is plain torch (resampling, the mel spectrum, mu-law:
bit for bit, so features and the cache of an older las agree), and within float32 rounding where
torchaudio ran a compiled loop (the biquads' recursion). tests/test_signal.py compares each with
torchaudio wherever it imports.

Waveforms are `(samples,)` or `(..., samples)` floating-point tensors on any device.
"""

from __future__ import annotations

import math

import numpy as np
import torch

# Band-limited interpolation (Smith's resample, as torchaudio's default): a Hann-windowed sinc
# reaching LOWPASS_ZEROS zero crossings each side, cut off at ROLLOFF of the lower Nyquist rate.
POWER_FLOOR = 1e-6  # added to mel power before the log: digital silence sits exactly there
LOWPASS_ZEROS = 6
ROLLOFF = 0.99
# Reduced rates whose product passes this are resampled without the whole filter bank, which
# holds about that many taps (phases x input samples per group): 70,560 from 44.1 kHz to 16 kHz,
# 89 million from 22254 Hz (360 MB). Each phase then keeps only the taps its window reaches.
LARGEST_BANK = 1 << 22


def resample(waveform: torch.Tensor, rate: int, new_rate: int) -> torch.Tensor:
    """`waveform` `(..., samples)` at `rate` Hz -> `(..., resampled_length(samples))` at `new_rate`."""
    if rate <= 0 or new_rate <= 0:
        raise ValueError(f"sample rates must be positive: {rate} -> {new_rate}")
    if rate == new_rate:
        return waveform
    if not waveform.is_floating_point():
        raise TypeError(f"resample needs a floating-point waveform, not {waveform.dtype}")
    divisor = math.gcd(int(rate), int(new_rate))
    filters = PhaseFilters(int(rate) // divisor, int(new_rate) // divisor, waveform.dtype, waveform.device)
    shape = waveform.shape
    flat = waveform.reshape(-1, shape[-1])  # (signals, samples)
    padded = torch.nn.functional.pad(flat, (filters.width, filters.width + filters.rate))
    resampled = filters(padded)[:, : resampled_length(shape[-1], filters.rate, filters.new_rate)]
    return resampled.reshape(*shape[:-1], resampled.shape[-1])


class PhaseFilters:
    """Resampling's filters between reduced rates, one per phase: output j of every group of
    `new_rate` reads the input from j * rate / new_rate, the groups `rate` input samples apart."""

    def __init__(self, rate: int, new_rate: int, dtype: torch.dtype, device: torch.device) -> None:
        self.rate, self.new_rate = rate, new_rate
        # Built whole and applied as one strided convolution, as torchaudio does (bit for bit),
        # where it is small; otherwise each phase's taps within its window, gathered.
        self.whole = rate * new_rate <= LARGEST_BANK
        first = None if self.whole else torch.arange(new_rate, device=device) * rate // new_rate
        self.kernel, self.width = sinc_kernel(rate, new_rate, dtype, device, first)
        self.span = 2 * self.width + rate  # input samples a group reads
        if first is not None:  # (new_rate, taps): where each phase's taps lie from its group's first sample
            self.reach = first[:, None] + torch.arange(self.kernel.shape[-1], device=device)

    def __call__(self, padded: torch.Tensor) -> torch.Tensor:
        """`(signals, samples)` already padded (`width` before) -> `(signals, groups * new_rate)`,
        a group of outputs for every `rate` samples that a group's `span` fits in."""
        if self.whole:
            # (signals, new_rate, groups)
            phases = torch.nn.functional.conv1d(padded[:, None], self.kernel, stride=self.rate)
            return phases.transpose(1, 2).reshape(len(padded), -1)
        groups = (padded.shape[-1] - self.span) // self.rate + 1
        padded = torch.nn.functional.pad(
            padded, (0, 1)
        )  # the last phase's last tap lies past the span (a window's end: ~0)
        step = max(1, LARGEST_BANK // self.kernel.numel())  # groups at a time: memory stays bounded
        outputs = []
        for first in range(0, max(0, groups), step):
            starts = torch.arange(first, min(groups, first + step), device=padded.device) * self.rate
            read = padded[:, starts[:, None, None] + self.reach]  # (signals, groups, new_rate, taps)
            outputs.append((read * self.kernel).sum(-1).reshape(len(padded), -1))
        return torch.cat(outputs, dim=1) if outputs else padded.new_zeros(len(padded), 0)


def sinc_kernel(
    rate: int, new_rate: int, dtype: torch.dtype, device: torch.device, first: torch.Tensor | None = None
) -> tuple[torch.Tensor, int]:
    """The `(new_rate, 1, 2 * width + rate)` filters of `resample` between reduced rates, computed in
    `dtype` (as torchaudio computes them in the waveform's), and their half-width `width`; or,
    given each phase's `first` tap `(new_rate,)` (its window's start), the `(new_rate, 2 * width + 2)`
    taps from there: the same values, the zeros outside the window left out."""
    cutoff = min(rate, new_rate) * ROLLOFF
    width = math.ceil(LOWPASS_ZEROS * rate / cutoff)
    if first is None:
        offsets = torch.arange(-width, width + rate, dtype=dtype, device=device)[None, None] / rate
        times = torch.arange(0, -new_rate, -1, dtype=dtype, device=device)[:, None, None] / new_rate + offsets
    else:
        offsets = (first[:, None] + torch.arange(2 * width + 2, device=device) - width).to(dtype) / rate
        times = torch.arange(0, -new_rate, -1, dtype=dtype, device=device)[:, None] / new_rate + offsets
    times *= cutoff
    times = times.clamp_(-LOWPASS_ZEROS, LOWPASS_ZEROS)
    window = torch.cos(times * math.pi / LOWPASS_ZEROS / 2) ** 2
    times *= math.pi
    kernel = torch.where(times == 0, torch.tensor(1.0).to(times), times.sin() / times)
    kernel *= window * (cutoff / rate)
    return kernel, width


class StreamingResampler:
    """`resample` of a signal that arrives in pieces (a WAV stream on a pipe at another rate than
    the model's): `push` each piece `(samples,)`, then `finish`. Joined, what they give is
    `resample` of the whole signal, however it was cut, within float32 rounding (the same filters
    over the same samples); each output waits for the filter's half-width of input after it
    (LOWPASS_ZEROS periods of the lower rate: 0.75 ms between 8 and 16 kHz)."""

    def __init__(self, rate: int, new_rate: int) -> None:
        if rate <= 0 or new_rate <= 0:
            raise ValueError(f"sample rates must be positive: {rate} -> {new_rate}")
        divisor = math.gcd(rate, new_rate)
        self.filters = PhaseFilters(rate // divisor, new_rate // divisor, torch.float32, torch.device("cpu"))
        self.pending = torch.zeros(
            self.filters.width
        )  # from the first sample the next group reads (zeros before the start)
        self.heard = self.given = 0  # input samples pushed, output samples given

    def push(self, samples: torch.Tensor) -> torch.Tensor:
        """The output `(samples,)` that the input so far decides."""
        self.heard += len(samples)
        if self.filters.rate == self.filters.new_rate:
            return samples.float()
        self.pending = torch.cat([self.pending, samples.float()])
        return self.groups(max(0, (len(self.pending) - self.filters.span) // self.filters.rate + 1))

    def finish(self) -> torch.Tensor:
        """The rest of the output, the signal followed by zeros as `resample` pads it."""
        if self.filters.rate == self.filters.new_rate:
            return torch.zeros(0)
        left = resampled_length(self.heard, self.filters.rate, self.filters.new_rate) - self.given
        count = -(-left // self.filters.new_rate)
        needed = (count - 1) * self.filters.rate + self.filters.span
        self.pending = torch.nn.functional.pad(self.pending, (0, max(0, needed - len(self.pending))))
        return self.groups(count)[: max(0, left)]

    def groups(self, count: int) -> torch.Tensor:
        """The next `count` groups of outputs, from `pending`, which then starts at the one after."""
        if count <= 0:
            return torch.zeros(0)
        used = self.pending[: (count - 1) * self.filters.rate + self.filters.span]
        output = self.filters(used[None])[0]  # (count * new_rate,)
        self.pending = self.pending[count * self.filters.rate :]
        self.given += len(output)
        return output


def resampled_length(length: int, rate: int, new_rate: int) -> int:
    """Samples `resample` gives `length` samples from `rate` to `new_rate`: the ceiling of the
    exact length after rounding to float32, as torchaudio's tensor arithmetic rounded it."""
    divisor = math.gcd(rate, new_rate)
    rate, new_rate = rate // divisor, new_rate // divisor
    if rate == new_rate:
        return length
    return int(np.ceil(np.float32(new_rate * length / rate)))


def mel_filter_bank(frequency_bins: int, sample_rate: int, mel_bins: int) -> torch.Tensor:
    """`(frequency_bins, mel_bins)` triangular filters spaced evenly on the HTK mel scale from 0 Hz
    to the Nyquist rate, each peaking at 1 (unnormalised), over the bins of a one-sided spectrum."""
    frequencies = torch.linspace(0, sample_rate // 2, frequency_bins)
    top = 2595.0 * math.log10(1.0 + float(sample_rate // 2) / 700.0)
    mels = torch.linspace(0.0, top, mel_bins + 2)
    corners = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)  # (mel_bins + 2,) Hz
    spacing = corners[1:] - corners[:-1]
    slopes = corners.unsqueeze(0) - frequencies.unsqueeze(1)  # (frequency_bins, mel_bins + 2)
    rising = (-1.0 * slopes[:, :-2]) / spacing[:-1]
    falling = slopes[:, 2:] / spacing[1:]
    return torch.max(torch.zeros(1), torch.min(rising, falling))


class MelPowerSpectrum:
    """`(samples,)` -> `(mel_bins, frames)`: the power spectrum of frames of `window` samples every
    `hop` (uncentred: frame f starts at f * hop), under a periodic Hann window, through
    `mel_filter_bank`."""

    def __init__(self, sample_rate: int, window: int, hop: int, mel_bins: int) -> None:
        self.window, self.hop = window, hop
        self.taper = torch.hann_window(window)
        self.filters = mel_filter_bank(window // 2 + 1, sample_rate, mel_bins)  # (bins, mel_bins)

    def __call__(self, waveform: torch.Tensor) -> torch.Tensor:
        spectrum = torch.stft(
            waveform.reshape(1, -1),
            n_fft=self.window,
            hop_length=self.hop,
            win_length=self.window,
            window=self.taper.to(waveform.device),
            center=False,
            onesided=True,
            return_complex=True,
        )[0]  # (bins, frames)
        power = spectrum.abs().pow(2.0)
        return torch.matmul(power.transpose(-1, -2), self.filters.to(waveform.device)).transpose(-1, -2)


# A biquad's impulse response is summed until it has fallen this far below its peak: far under
# float32's resolution, so the truncated convolution is the recursion to float32 rounding.
IMPULSE_FLOOR = 1e-12


def lowpass(waveform: torch.Tensor, rate: int, cutoff: float, quality: float = 0.707) -> torch.Tensor:
    """Through a second-order low-pass filter (the Audio EQ Cookbook's) at `cutoff` Hz."""
    angle = 2 * math.pi * cutoff / rate
    alpha = math.sin(angle) / 2 / quality
    b0 = (1 - math.cos(angle)) / 2
    return biquad(waveform, (b0, 1 - math.cos(angle), b0), (1 + alpha, -2 * math.cos(angle), 1 - alpha))


def highpass(waveform: torch.Tensor, rate: int, cutoff: float, quality: float = 0.707) -> torch.Tensor:
    """Through a second-order high-pass filter (the Audio EQ Cookbook's) at `cutoff` Hz."""
    angle = 2 * math.pi * cutoff / rate
    alpha = math.sin(angle) / 2 / quality
    b0 = (1 + math.cos(angle)) / 2
    return biquad(waveform, (b0, -1 - math.cos(angle), b0), (1 + alpha, -2 * math.cos(angle), 1 - alpha))


def biquad(
    waveform: torch.Tensor, numerator: tuple[float, float, float], denominator: tuple[float, float, float]
) -> torch.Tensor:
    """`waveform` `(..., samples)` through the stable filter `numerator / denominator` (coefficients
    of z^0, z^-1, z^-2), its output clamped to [-1, 1] as torchaudio's `lfilter` clamps it.

    A recursion runs one sample after another, which in Python is slow; the filter's impulse
    response, summed until it fades (IMPULSE_FLOOR), is applied instead as one FFT convolution in
    float64."""
    response = impulse_response(numerator, denominator)
    shape = waveform.shape
    flat = waveform.reshape(-1, shape[-1]).double()
    size = 1 << (shape[-1] + len(response) - 2).bit_length()  # a power of two: a fast FFT
    spectrum = torch.fft.rfft(flat, size) * torch.fft.rfft(torch.from_numpy(response).to(flat.device), size)
    filtered = torch.fft.irfft(spectrum, size)[:, : shape[-1]]
    return filtered.clamp(-1.0, 1.0).to(waveform.dtype).reshape(shape)


def impulse_response(numerator: tuple[float, float, float], denominator: tuple[float, float, float]) -> np.ndarray:
    """The impulse response of a stable biquad, until it falls IMPULSE_FLOOR under its peak."""
    b0, b1, b2 = (value / denominator[0] for value in numerator)
    a1, a2 = (value / denominator[0] for value in denominator[1:])
    if not (abs(a2) < 1 and abs(a1) < 1 + a2):  # the poles inside the unit circle
        raise ValueError(f"the biquad {numerator} / {denominator} is not stable")
    response, previous, before = [], 0.0, 0.0
    inputs = iter((b0, b1, b2))
    peak = 0.0
    while True:
        value = next(inputs, 0.0) - a1 * previous - a2 * before
        response.append(value)
        peak = max(peak, abs(value))
        before, previous = previous, value
        if len(response) > 3 and max(abs(previous), abs(before)) <= IMPULSE_FLOOR * peak:
            return np.array(response)


def mu_law_encode(waveform: torch.Tensor, levels: int) -> torch.Tensor:
    """Samples in [-1, 1] -> integer codes 0 .. levels - 1 of mu-law companding (G.711's curve)."""
    mu = torch.tensor(levels - 1.0, dtype=waveform.dtype)
    companded = torch.sign(waveform) * torch.log1p(mu * torch.abs(waveform)) / torch.log1p(mu)
    return ((companded + 1) / 2 * mu + 0.5).to(torch.int64)


def mu_law_decode(codes: torch.Tensor, levels: int) -> torch.Tensor:
    """Integer codes of `mu_law_encode` -> float32 samples in [-1, 1]."""
    codes = codes.to(torch.float)
    mu = torch.tensor(levels - 1.0, dtype=codes.dtype)
    companded = codes / mu * 2 - 1.0
    return torch.sign(companded) * (torch.exp(torch.abs(companded) * torch.log1p(mu)) - 1.0) / mu
