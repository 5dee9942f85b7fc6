"""Sounds that are not speech, decoded: does a recogniser spell them out as words?

    python scripts/nonspeech.py build                         # the sets, once (seconds)
    python scripts/nonspeech.py measure runs/an4/averaged.pt runs/an4-2/averaged.pt ...

`build` writes under `runs/robustness/nonspeech-sounds/` two folders of FLAC recordings, 3 and 8 s,
three draws each:

    seen       the families training can draw (`train.augment.nonspeech`, las/data/augmentation/nonspeech.py:
               music, typing, knocking, a ringtone), new draws, and a crowd of 20 dev speakers
    held-out   families training never hears, written here: clapping, a door (a creak and a
               slam), birdsong, a dog barking, a siren

`measure` decodes both with each checkpoint (the default decoding, `las decode`'s defaults) and
prints per family the share of recordings given no text at all and the characters decoded (mean
and most), over the checkpoints (seeds). Each checkpoint's results are kept beside it
(CHECKPOINT.nonspeech.json), as `scripts/robustness.py` keeps its own.
"""

from __future__ import annotations

import math
import statistics
import tempfile
from pathlib import Path

import soundfile
import torch
import typer
from harness import header
from robustness import DEV, RATE, dev_rows, kept, write_audio

from las.data.augmentation.channel_effects import pink_noise
from las.data.augmentation.nonspeech import SOUNDS, Sound, add_at, at_peak, crowd, events, quiet_room, ringing, uniform
from las.recognition.decode import decode
from las.recognition.transcripts import read_transcripts

SETS = DEV.parent.parent.parent / "runs" / "robustness" / "nonspeech-sounds"
SECONDS = (3, 8)
DRAWS = 3

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def clapping(samples: int, rate: int, generator: torch.Generator) -> torch.Tensor:
    """Applause of one to three people: bursts of noise of 5-15 ms, coloured by the hands' cavity
    (a resonance of 1-2.5 kHz), 3-8 a second each."""
    waveform = torch.zeros(samples)
    for _ in range(int(torch.randint(1, 4, (), generator=generator))):
        for start in events(samples, rate, uniform(3, 8, generator), generator):
            length = int(0.05 * rate)
            decay = torch.exp(-torch.arange(length) / (uniform(0.005, 0.015, generator) * rate))
            burst = torch.randn(length, generator=generator) * decay
            cavity = ringing([uniform(1000, 2500, generator)], 0.02, length, rate)
            add_at(waveform, uniform(0.5, 1.0, generator) * (burst + cavity), start)
    return at_peak(waveform)


def door(samples: int, rate: int, generator: torch.Generator) -> torch.Tensor:
    """A door closing, now and then: a creak (a rough sawtooth gliding over 200-900 Hz), then a
    slam (a heavy low resonance and a rattle of noise decaying over half a second)."""
    waveform = quiet_room(samples, generator)
    for start in events(samples, rate, 0.4, generator) or [samples // 4]:
        creak_length = int(uniform(0.3, 0.8, generator) * rate)
        time = torch.arange(creak_length) / rate
        glide = uniform(200, 500, generator) + uniform(100, 400, generator) * torch.sin(math.pi * time / time[-1])
        creak = 2 * (torch.cumsum(glide, 0) / rate % 1) - 1  # a sawtooth
        creak *= 1 + 0.5 * torch.randn(creak_length, generator=generator).clamp(-1, 1)
        add_at(waveform, 0.2 * creak * torch.hann_window(creak_length), start)
        length = int(0.6 * rate)
        slam = ringing([uniform(50, 120, generator), uniform(150, 250, generator)], 0.3, length, rate)
        rattle = torch.randn(length, generator=generator) * torch.exp(-torch.arange(length) / (0.08 * rate))
        add_at(waveform, slam + 0.5 * rattle, start + creak_length)
    return at_peak(waveform)


def birdsong(samples: int, rate: int, generator: torch.Generator) -> torch.Tensor:
    """Trills of three to eight chirps, each a sweep within 0-6 kHz of 30-150 ms with a harmonic."""
    waveform = quiet_room(samples, generator)
    for start in events(samples, rate, 1.0, generator):
        for _ in range(int(torch.randint(3, 9, (), generator=generator))):
            length = int(uniform(0.03, 0.15, generator) * rate)
            time = torch.arange(length) / rate
            sweep = uniform(2000, 4000, generator) + uniform(-2000, 2000, generator) * time / time[-1]
            phase = 2 * math.pi * torch.cumsum(sweep, 0) / rate
            add_at(waveform, (torch.sin(phase) + 0.3 * torch.sin(2 * phase)) * torch.hann_window(length), start)
            start += length + int(uniform(0.01, 0.05, generator) * rate)
    return at_peak(waveform)


def barking(samples: int, rate: int, generator: torch.Generator) -> torch.Tensor:
    """A dog: barks of 0.1-0.25 s in groups of one to three, each a harmonic series whose pitch
    (400-900 Hz) falls through the bark, roughened with noise, under a fast attack and decay."""
    waveform = quiet_room(samples, generator)
    for start in events(samples, rate, 0.8, generator):
        for _ in range(int(torch.randint(1, 4, (), generator=generator))):
            length = int(uniform(0.1, 0.25, generator) * rate)
            time = torch.arange(length) / rate
            pitch = uniform(400, 900, generator) * (1 - 0.3 * time / time[-1])
            phase = 2 * math.pi * torch.cumsum(pitch, 0) / rate
            voice = sum(torch.sin(k * phase) / k for k in range(1, 8))
            rough = 1 + 0.4 * torch.randn(length, generator=generator)
            envelope = (time / 0.01).clamp(max=1) * torch.exp(-time / 0.08)
            add_at(waveform, voice * rough * envelope, start)
            start += length + int(uniform(0.1, 0.3, generator) * rate)
    return at_peak(waveform)


def siren(samples: int, rate: int, generator: torch.Generator) -> torch.Tensor:
    """An emergency siren's wail: a tone with its harmonics rising and falling between 600 and
    1,500 Hz, 2-4 s a cycle."""
    time = torch.arange(samples) / rate
    low, period = uniform(600, 800, generator), uniform(2, 4, generator)
    pitch = low + (1500 - low) * (0.5 - 0.5 * torch.cos(2 * math.pi * time / period))
    phase = 2 * math.pi * torch.cumsum(pitch, 0) / rate
    return at_peak(sum(torch.sin(k * phase) / k for k in range(1, 5)) + 0.01 * pink_noise(samples, generator))


HELD_OUT: dict[str, Sound] = {
    "clapping": clapping,
    "door": door,
    "birdsong": birdsong,
    "barking": barking,
    "siren": siren,
}
GROUPS = ("seen", "held-out")


@app.command()
def build(out: Path = SETS) -> None:
    """Write the sets."""
    dev = [torch.from_numpy(soundfile.read(DEV.parent / audio, dtype="float32")[0]) for _, audio, _, _ in dev_rows()]
    groups = {"seen": {**SOUNDS, "crowd": crowd(dev)}, "held-out": HELD_OUT}
    for group, sounds in groups.items():
        folder = out / group
        folder.mkdir(parents=True, exist_ok=True)
        for name, sound in sounds.items():
            for seconds in SECONDS:
                for draw in range(DRAWS):
                    # Seeds from 1000: training draws its own from 62-bit seeds, never these.
                    generator = torch.Generator().manual_seed(1000 + draw)
                    write_audio(folder / f"{name}-{seconds}s-{draw}.flac", sound(seconds * RATE, RATE, generator))
        print(f"{group}: {len(sounds) * len(SECONDS) * DRAWS} recordings of {', '.join(sounds)}")


def decoded(checkpoint: Path, sets: Path) -> dict[str, dict[str, int]]:
    """Characters decoded per recording, per group: the default decoding."""

    def compute() -> dict[str, dict[str, int]]:
        found = {}
        for group in GROUPS:
            with tempfile.TemporaryDirectory() as folder:
                output = Path(folder) / "hypotheses.csv"
                decode(checkpoint, sets / group, output, "csv", [], "cpu")
                found[group] = {key: len(text) for key, text in read_transcripts(output).items()}
        return found

    return kept(checkpoint, "nonspeech", [str(sets)], compute)


@app.command()
def measure(
    checkpoints: list[Path] = typer.Argument(..., help="One checkpoint per seed."),
    sets: Path = SETS,
) -> None:
    """Per family: recordings given no text, and characters decoded, over the checkpoints."""
    results = [decoded(checkpoint, sets) for checkpoint in checkpoints]
    print(f"{len(checkpoints)} checkpoint(s), {len(SECONDS) * DRAWS} recordings per family each\n")
    print(header("group", "family", "no text, %", "characters: mean", "most"))
    for group in GROUPS:
        counts: dict[str, list[int]] = {}
        for result in results:
            for key, characters in result[group].items():
                counts.setdefault(key.rsplit("-", 2)[0], []).append(characters)
        counts["all"] = [value for family in list(counts.values()) for value in family]
        for family, values in counts.items():
            silent = 100 * sum(value == 0 for value in values) / len(values)
            print(f"| {group} | {family} | {silent:.0f} | {statistics.mean(values):.1f} | {max(values)} |")


if __name__ == "__main__":
    app()
