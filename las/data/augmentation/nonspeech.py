"""Sounds that are not speech but rise and fall as it does, band by band: music, typing, knocks
on a door, a telephone's ring, a crowd. Synthesised from their physics (a note is a harmonic
series under an envelope; a key click a broadband transient ringing at a few resonances; a knock
a struck panel's low resonances), so that anyone can rebuild them: training hears them with an
empty transcript (`NonSpeech`), and `scripts/nonspeech.py` checks, with these and with families
training never hears, that a recogniser spells none of them out as words.

Waveforms are `(samples,)` float32 at `rate`, peak 0.3 (a recording's level, not clipped); every
random choice draws from the `generator` given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from las.core.config import Config
from las.data.augmentation.channel_effects import babble, pink_noise
from las.data.front_end.features import FilterbankExtractor, log_mel_features

Sound = Callable[[int, int, torch.Generator], torch.Tensor]  # (samples, rate, generator) -> (samples,)
PEAK = 0.3


def uniform(low: float, high: float, generator: torch.Generator) -> float:
    return low + (high - low) * float(torch.rand((), generator=generator))


def at_peak(waveform: torch.Tensor) -> torch.Tensor:
    return PEAK * waveform / waveform.abs().max().clamp(min=1e-9)


def quiet_room(samples: int, generator: torch.Generator) -> torch.Tensor:
    """A room's quiet background, 50 dB under a sound at its peak."""
    return 0.002 * pink_noise(samples, generator)


def ringing(frequencies: Sequence[float], decay_s: float, samples: int, rate: int) -> torch.Tensor:
    """Damped sinusoids at `frequencies`, each falling by 60 dB in `decay_s`: a struck resonator."""
    time = torch.arange(samples) / rate
    envelope = torch.exp(-6.9078 * time / decay_s)
    return sum(torch.sin(2 * math.pi * frequency * time) for frequency in frequencies) * envelope


def add_at(waveform: torch.Tensor, event: torch.Tensor, start: int) -> None:
    """Mix `event` into `waveform` from sample `start`, cut at its end."""
    end = min(len(waveform), start + len(event))
    if start < end:
        waveform[start:end] += event[: end - start]


def events(samples: int, rate: int, per_second: float, generator: torch.Generator) -> list[int]:
    """Start samples of a Poisson process of `per_second` events."""
    starts, time = [], 0.0
    while True:
        time += -math.log(1 - uniform(0, 0.999, generator)) / per_second
        if time * rate >= samples:
            return starts
        starts.append(int(time * rate))


def music(samples: int, rate: int, generator: torch.Generator) -> torch.Tensor:
    """A melody over a bass line: notes of a major scale, each a harmonic series (partials falling
    as 1/k) under an attack and exponential decay, with vibrato; and a kick and a hi-hat on the
    beat."""
    beat = 60 / uniform(90, 140, generator)  # seconds
    root = uniform(196, 330, generator)  # Hz: G3 to E4
    scale = [0, 2, 4, 5, 7, 9, 11, 12]
    waveform = torch.zeros(samples)
    for voice, (octave, notes_per_beat, partials) in enumerate([(1.0, 2, 8), (0.25, 1, 5)]):
        start = 0
        while start < samples:
            length = int(beat / notes_per_beat * rate)
            step = scale[int(torch.randint(len(scale), (), generator=generator))]
            frequency = octave * root * 2 ** (step / 12)
            time = torch.arange(length) / rate
            vibrato = 1 + 0.005 * torch.sin(2 * math.pi * 5.5 * time)
            phase = 2 * math.pi * frequency * torch.cumsum(vibrato, 0) / rate
            note = sum(torch.sin(k * phase) / k for k in range(1, partials + 1) if k * frequency < rate / 2)
            envelope = (time / 0.01).clamp(max=1) * torch.exp(-time / (0.4 * beat * (voice + 1)))
            add_at(waveform, note * envelope * (0.6 if voice else 1.0), start)
            start += length
    for start in range(0, samples, int(beat * rate)):
        kick_time = torch.arange(int(0.15 * rate)) / rate
        kick = torch.sin(2 * math.pi * (150 * kick_time - 200 * kick_time**2)) * torch.exp(-kick_time / 0.04)
        add_at(waveform, 0.8 * kick, start)
        hat_length = int(0.05 * rate)
        hat = torch.randn(hat_length, generator=generator) * torch.exp(-torch.arange(hat_length) / (0.01 * rate))
        add_at(waveform, 0.2 * (hat - hat.roll(1)), start + int(beat * rate / 2))
    return at_peak(waveform)


def typing(samples: int, rate: int, generator: torch.Generator) -> torch.Tensor:
    """Key clicks, about 7 a second in bursts: each a millisecond of broadband noise ringing at a
    few resonances of the keyboard (1.5-6 kHz) for 10-30 ms, at random strengths, over a quiet room."""
    waveform = quiet_room(samples, generator)
    for start in events(samples, rate, 7.0, generator):
        length = int(0.04 * rate)
        click = torch.randn(length, generator=generator) * (torch.arange(length) < 0.001 * rate)
        resonances = [uniform(1500, 6000, generator) for _ in range(3)]
        ring = ringing(resonances, uniform(0.01, 0.03, generator), length, rate) * 0.3
        add_at(waveform, uniform(0.3, 1.0, generator) * (click + ring), start)
    return at_peak(waveform)


def knocking(samples: int, rate: int, generator: torch.Generator) -> torch.Tensor:
    """Knocks on a door, in groups of two to four a quarter second apart: a wooden panel struck,
    ringing at 100-400 Hz for about 0.1 s."""
    waveform = quiet_room(samples, generator)
    start = int(uniform(0.1, 0.5, generator) * rate)
    while start < samples:
        for _ in range(int(torch.randint(2, 5, (), generator=generator))):
            length = int(0.2 * rate)
            panel = [uniform(100, 400, generator) for _ in range(3)]
            thump = ringing(panel, uniform(0.06, 0.15, generator), length, rate)
            add_at(waveform, uniform(0.6, 1.0, generator) * thump, start)
            start += int(uniform(0.18, 0.3, generator) * rate)
        start += int(uniform(0.8, 2.0, generator) * rate)
    return at_peak(waveform)


def ringtone(samples: int, rate: int, generator: torch.Generator) -> torch.Tensor:
    """A telephone ringing: two tones (a major third apart, 400-600 Hz and up) alternating 20
    times a second, 0.4 s on, 0.2 off, 0.4 on, then 2 s of quiet (the UK cadence)."""
    low = uniform(400, 600, generator)
    time = torch.arange(samples) / rate
    frequency = torch.where((time * 20).floor() % 2 == 0, low, 1.25 * low)
    tone = torch.sin(2 * math.pi * torch.cumsum(frequency, 0) / rate)  # the phase runs on at a switch
    cycle = time % 3.0
    on = ((cycle < 0.4) | ((cycle >= 0.6) & (cycle < 1.0))).float()
    return at_peak(tone * on + quiet_room(samples, generator))


def crowd(pool: Sequence[torch.Tensor]) -> Sound:
    """A crowd: CROWD_TALKERS talkers from `pool` at once, none of them to be followed."""

    def sound(samples: int, rate: int, generator: torch.Generator) -> torch.Tensor:
        return at_peak(babble(pool, samples, talkers=CROWD_TALKERS, generator=generator))

    return sound


CROWD_TALKERS = 20
SOUNDS: dict[str, Sound] = {"music": music, "typing": typing, "knocking": knocking, "ringtone": ringtone}
LEVEL_DB = (-30.0, 0.0)  # a drawn sound's level under its PEAK


@dataclass(frozen=True)
class NonSpeech:
    """Training draws that are not speech (`train.augment.nonspeech`): a model that has only heard
    speech spells out whatever it hears (music as "THREE EIGHT THREE TWO", typing as "STOP"), so
    a share of the draws is a sound of SOUNDS or a crowd, at the utterance's length and a random
    level, with an empty transcript to learn from."""

    share: float
    rate: int
    hop_seconds: float
    extractor: FilterbankExtractor
    pool: Sequence[torch.Tensor]  # waveforms of training utterances for crowds; empty: no crowds

    @classmethod
    def of(cls, config: Config, pool: Sequence[torch.Tensor]) -> NonSpeech | None:
        share = config.train.augment.nonspeech
        if not share:
            return None
        features = config.features
        return cls(share, features.sample_rate, features.hop_ms / 1000, FilterbankExtractor(features), pool)

    def draw(self, frames: int, generator: torch.Generator) -> torch.Tensor | None:
        """Log-mel features `(frames, mel_bins)` of a sound `frames` long, or None when this draw
        keeps its utterance."""
        if torch.rand((), generator=generator, dtype=torch.float64).item() >= self.share:
            return None
        sounds = list(SOUNDS.values()) + ([crowd(self.pool)] if self.pool else [])
        sound = sounds[int(torch.randint(len(sounds), (), generator=generator))]
        level = 10 ** (uniform(*LEVEL_DB, generator) / 20)
        samples = max(1, round((frames - 1) * self.hop_seconds * self.rate))  # centred frames: one more
        return log_mel_features(self.extractor, level * sound(samples, self.rate, generator), "a non-speech sound")
