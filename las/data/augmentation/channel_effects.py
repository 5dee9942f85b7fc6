"""What a recording goes through on its way to a model outside the recording room: a telephone
channel, a lossy codec, a gain, a compressor, noise at a signal-to-noise ratio (white, pink, brown,
mains hum, babble), a reverberant room.

Waveforms are `(samples,)` float32 at `rate`. Every random choice draws from the `generator`
given, so training augmentation is reproducible (and resumes exactly), and the evaluation sets
of `scripts/robustness.py` are the same on every machine.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import soundfile
import torch

from las.data.front_end.signal import highpass, lowpass, mu_law_decode, mu_law_encode, resample

TELEPHONE_RATE = 8000
TELEPHONE_BAND = (300.0, 3400.0)  # Hz: what a (narrowband, G.711) telephone line passes


def telephone(waveform: torch.Tensor, rate: int, low: float = 300.0, high: float = 3400.0) -> torch.Tensor:
    """Through a narrowband telephone line: band-pass `low`-`high` Hz, sampled at 8 kHz with 8-bit
    mu-law companding (G.711), and back to `rate` — the bandwidth of telephone speech."""
    band = lowpass(highpass(waveform, rate, low), rate, high)
    narrow = resample(band, rate, TELEPHONE_RATE)
    narrow = mu_law_decode(mu_law_encode(narrow.clamp(-1, 1), 256), 256)
    return resample(narrow, TELEPHONE_RATE, rate)[: len(waveform)]


# libsndfile's container and encoding of each codec `encoded` knows; its compression level (0-1)
# sets the bit rate (for 16 kHz mono, MP3 at constant rate: 0.9 -> 24 kbit/s; Opus: 0.99 -> 8).
CODECS = {"mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS")}


def encoded(waveform: torch.Tensor, rate: int, codec: str, level: float) -> torch.Tensor:
    """`waveform` `(samples,)` through a lossy codec of CODECS and back, as a voice memo, a podcast
    or a call app leaves speech: encoded at compression `level` (0-1), decoded as a reader would.
    The decoded audio is what the codec gives back, its encoder's delay included."""
    container, encoding = CODECS[codec]
    constant = {"bitrate_mode": "CONSTANT"} if codec == "mp3" else {}
    buffer = io.BytesIO()
    samples = waveform.clamp(-1, 1).numpy()
    soundfile.write(buffer, samples, rate, format=container, subtype=encoding, compression_level=level, **constant)
    buffer.seek(0)
    decoded, _ = soundfile.read(buffer, dtype="float32")
    return torch.from_numpy(decoded)


def in_16_bits(waveform: torch.Tensor) -> torch.Tensor:
    """`waveform` `(samples,)` as a 16-bit file holds it: rounded to its grid."""
    return (waveform * 2**15).round().clamp(-(2**15), 2**15 - 1) / 2**15


def clipped(waveform: torch.Tensor, over_db: float) -> torch.Tensor:
    """`waveform` `(samples,)` through a microphone or preamplifier set too hot: its peak driven
    `over_db` over full scale, and everything beyond full scale cut flat, in 16 bits."""
    peak = float(waveform.abs().max()) if len(waveform) else 0.0
    if peak == 0.0:
        return waveform
    return in_16_bits(waveform * (10 ** (over_db / 20) / peak))


def frame_levels_db(waveform: torch.Tensor, frame: int) -> torch.Tensor:
    """`(frames,)` the power in dBFS of `waveform`'s `(samples,)` frames of `frame` samples, the
    last one padded with zeros."""
    frames = torch.nn.functional.pad(waveform, (0, -len(waveform) % frame)).reshape(-1, frame)
    return 10 * torch.log10(frames.pow(2).mean(dim=1).clamp_min(1e-12))


def compressed(
    waveform: torch.Tensor, frame: int, threshold_db: float, ratio: float, peak_db: float = -1.0
) -> torch.Tensor:
    """`waveform` `(samples,)` through a compressor, as a phone's automatic gain or a broadcast
    chain leaves speech: each frame's level (`frame` samples) above `threshold_db` (dBFS) reduced
    `ratio` to 1, the gain between frames' centres interpolated, then the whole raised to a peak
    of `peak_db`. Loud and flat, nothing cut."""
    level = frame_levels_db(waveform, frame)
    reduction = (level - threshold_db).clamp_min(0) * (1 - 1 / ratio)  # (frames,) dB
    # (samples,): frame values at frame centres, linear between them
    reduction = torch.nn.functional.interpolate(reduction[None, None], size=len(level) * frame, mode="linear")[0, 0]
    flattened = waveform * 10 ** (-reduction[: len(waveform)] / 20)
    peak = flattened.abs().max() if len(flattened) else torch.zeros(())
    return flattened * (10 ** (peak_db / 20) / peak) if peak > 0 else flattened


def power(waveform: torch.Tensor) -> torch.Tensor:
    return waveform.pow(2).mean().clamp_min(1e-10)


def add_noise(waveform: torch.Tensor, noise: torch.Tensor, snr_db: float) -> torch.Tensor:
    """`waveform` plus `noise` (repeated or cut to its length) scaled to `snr_db` below it."""
    repeats = math.ceil(len(waveform) / len(noise))
    noise = noise.repeat(repeats)[: len(waveform)]
    scale = torch.sqrt(power(waveform) / (power(noise) * 10 ** (snr_db / 10)))
    return waveform + scale * noise


def white_noise(samples: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(samples, generator=generator)


def pink_noise(samples: int, generator: torch.Generator) -> torch.Tensor:
    """Noise with power falling as 1/f (3 dB per octave), as much of the noise of rooms and machines."""
    spectrum = torch.fft.rfft(torch.randn(samples, generator=generator))
    frequencies = torch.arange(len(spectrum)).clamp_min(1).float()
    return torch.fft.irfft(spectrum / frequencies.sqrt(), n=samples)


def brown_noise(samples: int, generator: torch.Generator) -> torch.Tensor:
    """Noise with power falling as 1/f² (6 dB per octave), a rumble: a random walk, its drift
    (the line from its first sample to its last) taken out."""
    walk = torch.randn(samples, generator=generator).cumsum(0)
    return walk - torch.linspace(float(walk[0]), float(walk[-1]), samples)


def hum(samples: int, rate: int, frequency: float = 60.0, harmonics: int = 7) -> torch.Tensor:
    """Mains hum: `frequency` and its first `harmonics` multiples, falling as 1/k."""
    time = torch.arange(samples) / rate
    return sum(torch.sin(2 * math.pi * frequency * k * time) / k for k in range(1, harmonics + 1))


def babble(pool: Sequence[torch.Tensor], samples: int, talkers: int, generator: torch.Generator) -> torch.Tensor:
    """The sum of `talkers` utterances drawn from `pool`, each from a random start, looped to `samples`."""
    mixture = torch.zeros(samples)
    for index in torch.randint(len(pool), (talkers,), generator=generator).tolist():
        speech = pool[index]
        start = int(torch.randint(len(speech), (1,), generator=generator))
        looped = speech.roll(-start).repeat(math.ceil(samples / len(speech)))[:samples]
        mixture += looped / power(looped).sqrt()
    return mixture


def room_response(rate: int, rt60: float, generator: torch.Generator) -> torch.Tensor:
    """A synthetic room impulse response: the direct sound, then exponentially decaying noise that
    falls by 60 dB in `rt60` seconds (the statistical model of late reverberation)."""
    samples = max(1, int(rt60 * rate))
    time = torch.arange(samples) / rate
    response = torch.randn(samples, generator=generator) * torch.exp(-6.9078 * time / rt60)  # ln(1000) = 6.9078
    response[0] = 1.0
    return response / response.norm()


def reverberate(waveform: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
    """`waveform` heard in the room of `response`, at the same loudness."""
    wet = convolve(waveform, response)[: len(waveform)]
    return wet * torch.sqrt(power(waveform) / power(wet))


def convolve(signal: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
    """The full linear convolution `(len(signal) + len(response) - 1,)`, by FFTs of the next power
    of two: an FFT of the exact length can have large prime factors, and took 2.7x as long on
    12.8 s recordings in a 0.5 s room (scripts/benchmark.py augmentation, torchaudio's `fftconvolve`)."""
    length = len(signal) + len(response) - 1
    size = 1 << (length - 1).bit_length()
    return torch.fft.irfft(torch.fft.rfft(signal, size) * torch.fft.rfft(response, size), size)[:length]


BACKGROUND_SECONDS = 0.2  # the quietest stretch this long of a recording is its background
PIECE_SECONDS = 0.05  # own_background is made of random pieces this long of it, overlapped


def own_background(waveform: torch.Tensor, samples: int, rate: int, generator: torch.Generator) -> torch.Tensor:
    """`(samples,)` of a recording's own background, as if it had gone on recording before or after
    its speech: random pieces of its quietest BACKGROUND_SECONDS (by power in 10 ms blocks),
    overlapped by half under Hann windows, which then sum to one, so the level stays."""
    block, stretch = rate // 100, round(BACKGROUND_SECONDS * rate)
    piece = min(round(PIECE_SECONDS * rate), len(waveform) // 2 * 2)  # even: a Hann window's halves
    if piece < 2 or len(waveform) < block:
        return torch.zeros(samples)  # nothing recorded to draw a background from
    blocks = waveform[: len(waveform) // block * block].reshape(-1, block).pow(2).mean(dim=1)  # (blocks,)
    span = min(len(blocks), stretch // block)
    quietest = int(blocks.unfold(0, span, 1).mean(dim=1).argmin()) * block
    pool = waveform[quietest : quietest + max(stretch, piece)]
    window = torch.hann_window(piece, periodic=True)
    out = torch.zeros(samples + piece)
    for start in range(0, samples, piece // 2):
        offset = int(torch.randint(len(pool) - piece + 1, (), generator=generator))
        out[start : start + piece] += window * pool[offset : offset + piece]
    return out[:samples]
