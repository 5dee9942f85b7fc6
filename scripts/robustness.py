"""Robustness beyond the recording room: AN4 dev through a telephone line, in babble and white
noise, faster and slower; and 10 s of noise or silence, which should give (almost) no text.

    python scripts/robustness.py build                      # the evaluation sets, once
    python scripts/robustness.py measure runs/an4/averaged.pt runs/an4-2/averaged.pt ...
    python scripts/robustness.py contrast                   # the margin of las's no-speech rule

`build` writes under `runs/robustness/sets/` one TSV manifest per condition (FLAC beside it):

    telephone      band-pass 300-3400 Hz, 8 kHz, 8-bit mu-law (G.711), back to 16 kHz
    babble-N       4 other dev utterances mixed in at N dB SNR (20, 10, 5): dev speakers, not train
    white-N        white noise at N dB SNR
    speed-0.9/1.1  Kaldi-style speed change (tempo and pitch)
    room-0.6       a synthetic room of RT60 0.6 s (the family training draws from: optimistic)
    clipped-10/20  a microphone set too hot: the peak driven 10 or 20 dB over full scale, cut flat
    compressed     a compressor (4:1 above -40 dBFS, 10 ms frames) and gain to a -1 dBFS peak, as a
                   phone's automatic gain or a broadcast chain leaves speech: loud, nothing cut
    mp3-24         MP3 at 24 kbit/s (constant rate), as a low-rate podcast or an old voice recorder
    opus-8         Opus at 8 kbit/s, the lowest rate a call or voice-message app drops to

and `nonspeech/` (10 s of white noise, 10 s of digital silence). Every random choice is seeded.

`build-surroundings CHECKPOINT` writes under `runs/robustness/surroundings/` the same words with
other surroundings (word edges by CTC forced alignment of the reference with CHECKPOINT's CTC head,
each start moved back to where its sound rises and each end on to where it falls):

    {silence,background}-{0.5,1,3}-{start,end,both}   digital zeros, or the recording's own
                   background (overlapped random pieces of its quietest 0.2 s), added around it
    dither-1-both  1 s of an export's dither (+-1 step of 16 bits) at each end instead of zeros
    hum-1-both     1 s of digital silence at each end, mains hum (50 Hz, -45 dBFS) under all of it
    beep-start/end a voicemail's beep (0.5 s of 1 kHz) in 0.3 s of background before or after it
    quiet-30/40    the recording 30 or 40 dB quieter, in 16 bits: a quiet microphone, whose
                   background is at an export's dither
    click-start/end a record button's click (5 ms, -20 dBFS) 0.3 s from the recording, in its background
    tight          cut from the first word's start to the last word's end
    words          every word cut out alone, one clip each; words-telephone: those, through the line
    gap-silence-0/1/3, gap-background-1/3   two consecutive dev recordings in one, with 0, 1 or 3 s
                   of digital silence, or 1 or 3 s of the first one's background, between them

`surroundings CHECKPOINT...` decodes them (the default decoding) and prints CER against the
unpadded dev set, and for single words the share decoded exactly right.
`measure` decodes each set with each checkpoint (greedy and the default beam search), and prints
the CER per condition (mean over the checkpoints, i.e. seeds, with the spread), its ratio to the
clean CER, and for greedy decoding the longest hypothesis against 1.5 x its reference + 5
characters, the bound a runaway transcript breaks; for non-speech, the longest text decoded.
Each checkpoint's results are kept beside it (CHECKPOINT.robustness.json): seeds measured by
separate processes, side by side, are then tabled together at once.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import json
import math
import statistics
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import soundfile
import torch
import typer
from harness import read_manifest

import las
from las.core.config import FeatureConfig
from las.core.files import write_text_atomically
from las.data.augmentation.channel_effects import (
    add_noise,
    babble,
    brown_noise,
    clipped,
    compressed,
    encoded,
    hum,
    own_background,
    pink_noise,
    power,
    reverberate,
    room_response,
    telephone,
    white_noise,
)
from las.data.front_end.audio import load_audio
from las.data.front_end.features import FilterbankExtractor, change_speed, log_mel_features
from las.data.front_end.segmentation import BAND_CONTRAST, SPEECH_BANDS, SPEECH_CONTRAST, Levels
from las.recognition.decode import decode
from las.recognition.forced_alignment import align
from las.recognition.recognizer import Recognizer
from las.recognition.transcripts import read_transcripts

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "data" / "an4" / "dev.tsv"
RATE = 16000
SETS = ROOT / "runs" / "robustness" / "sets"
SNRS = (20, 10, 5)
CONDITIONS = ["clean", "telephone", *[f"{kind}-{snr}" for kind in ("babble", "white") for snr in SNRS]]
CODEC_LEVELS = {"mp3-24": 0.9, "opus-8": 0.99}  # the compression level of las.data.augmentation.channel_effects.encoded
CONDITIONS += ["speed-0.9", "speed-1.1", "room-0.6", "clipped-10", "clipped-20", "compressed", *CODEC_LEVELS]
DECODINGS = {"greedy": ["decode.strategy=greedy"], "beam": ["decode.strategy=beam"]}

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def dev_rows(source: Path = DEV) -> list[list[str]]:
    return read_manifest(source)[1]


def conditions(pool: list[torch.Tensor]) -> dict[str, Callable[[int, torch.Tensor, torch.Generator], torch.Tensor]]:
    """Name -> what happens to utterance `index`'s waveform."""

    def other_talkers(index: int, waveform: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        others = pool[:index] + pool[index + 1 :]
        return babble(others, len(waveform), talkers=4, generator=generator)

    made: dict[str, Callable[[int, torch.Tensor, torch.Generator], torch.Tensor]] = {
        "telephone": lambda index, waveform, generator: telephone(waveform, RATE),
    }
    for snr in SNRS:
        made[f"babble-{snr}"] = lambda i, w, g, snr=snr: add_noise(w, other_talkers(i, w, g), snr)
        made[f"white-{snr}"] = lambda i, w, g, snr=snr: add_noise(w, white_noise(len(w), g), snr)
    # A synthetic room of RT60 0.6 s: the kind training draws from (0.2-0.8 s), so this reads
    # how well it learned that family, not how it fares in rooms it has never met.
    made["room-0.6"] = lambda i, w, g: reverberate(w, room_response(RATE, 0.6, g))
    for speed in (0.9, 1.1):
        made[f"speed-{speed}"] = lambda i, w, g, speed=speed: change_speed(w, speed, RATE)
    for over in (10, 20):  # a microphone set too hot: 4% and 22% of AN4 dev's samples cut flat
        made[f"clipped-{over}"] = lambda i, w, g, over=over: clipped(w, over)
    made["compressed"] = lambda i, w, g: compressed(w, RATE // 100, threshold_db=-40.0, ratio=4.0)
    for name, level in CODEC_LEVELS.items():  # at the bit rate its name gives, in kbit/s
        made[name] = lambda i, w, g, name=name, level=level: encoded(w, RATE, name.split("-")[0], level)
    return made


def write_audio(path: Path, waveform: torch.Tensor) -> None:
    peak = waveform.abs().max().item()
    if peak > 0.999:  # loud mixtures: scaled down whole, so the SNR stays
        waveform = waveform * (0.999 / peak)
    soundfile.write(path, waveform.numpy(), RATE, subtype="PCM_16")


def write_set(out: Path, name: str, items: list[tuple[str, torch.Tensor, str]]) -> None:
    """`(id, waveform, text)` items as FLAC files in `out/name/` and the manifest `out/name.tsv`."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["id\tpath\tduration_s\ttext"]
    for identifier, waveform, text in items:
        write_audio(folder / f"{identifier}.flac", waveform)
        lines.append(f"{identifier}\t{name}/{identifier}.flac\t{len(waveform) / RATE:.2f}\t{text}")
    (out / f"{name}.tsv").write_text("\n".join(lines) + "\n")
    print(f"{name}: {len(items)} recordings")


@app.command()
def build(
    out: Path = SETS,
    seed: int = 0,
    only: list[str] = typer.Option([], "--only", help="Only the sets matching these patterns."),
    source: Path = typer.Option(DEV, help="The utterances to transform (scripts/tuning.py: the choosing speakers)."),
) -> None:
    """Write the evaluation sets."""
    rows = dev_rows(source)
    pool = [torch.from_numpy(soundfile.read(source.parent / audio, dtype="float32")[0]) for _, audio, _, _ in rows]
    for name, transform in [(name, made) for name, made in conditions(pool).items() if matches(name, only)]:
        generator = torch.Generator().manual_seed(seed)
        items = [
            (identifier, transform(index, pool[index], generator), text)
            for index, (identifier, _, _, text) in enumerate(rows)
        ]
        write_set(out, name, items)
    nonspeech = out / "nonspeech"
    nonspeech.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    write_audio(nonspeech / "white-10s.flac", 0.05 * white_noise(10 * RATE, generator))
    write_audio(nonspeech / "silence-10s.flac", torch.zeros(10 * RATE))
    print("nonspeech: white-10s, silence-10s")


def transcribe(checkpoint: Path, source: Path, settings: list[str], device: str = "cpu") -> dict[str, str]:
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "hypotheses.csv"
        decode(checkpoint, source, output, "csv", settings, device)
        return read_transcripts(output)


def character_error_rate(hypotheses: dict[str, str], manifest: Path) -> float:
    """CER of `hypotheses` against the transcripts of `manifest`."""
    from las.core.metrics import character_error_rate as rate

    references = read_transcripts(manifest)
    identifiers = sorted(references)
    return rate([hypotheses[identifier] for identifier in identifiers], [references[i] for i in identifiers])


def overrun(hypotheses: dict[str, str], references: dict[str, str]) -> int:
    """Characters by which the longest hypothesis exceeds 1.5 x its reference + 5 (<= 0: none does)."""
    return max(len(hypotheses[identifier]) - int(1.5 * len(text) + 5) for identifier, text in references.items())


def summary(values: list[float]) -> str:
    mean = statistics.mean(values)
    return f"{mean:.1f}" + (f" ({min(values):.1f}-{max(values):.1f})" if len(values) > 1 else "")


def code_digest() -> str:
    """A digest of las's source: results kept from other code (features, decoding) are not reused."""
    digest = hashlib.sha256()
    for path in sorted(Path(las.__file__).parent.rglob("*.py")):  # the las imported, wherever it is
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


# Of las as this process loaded it: a file edited while a measurement runs does not label its results.
CODE = code_digest()


def measure_checkpoint(
    checkpoint: Path, sets: Path, settings: list[str], device: str, names: list[str]
) -> dict[str, dict]:
    """One checkpoint's CER per decoding and condition of `names`, and its greedy overruns (and the
    longest text decoded from each recording without speech), kept beside it (`kept`)."""

    def compute() -> dict[str, dict]:
        rates: dict[str, dict[str, float]] = {}
        overruns: dict[str, int] = {}
        for decoding, decoding_settings in DECODINGS.items():
            for name in names:
                source = DEV if name == "clean" else sets / f"{name}.tsv"
                hypotheses = transcribe(checkpoint, source, decoding_settings + settings, device)
                rates.setdefault(decoding, {})[name] = character_error_rate(hypotheses, DEV)
                if decoding == "greedy":
                    overruns[name] = overrun(hypotheses, read_transcripts(DEV))
        nonspeech = transcribe(checkpoint, sets / "nonspeech", DECODINGS["greedy"] + settings, device)
        overruns.update({identifier: len(text) for identifier, text in nonspeech.items()})
        return {"rates": rates, "overruns": overruns}

    return kept(checkpoint, "robustness", settings + ([] if names == CONDITIONS else names), compute)


@app.command()
def measure(
    checkpoints: list[Path] = typer.Argument(..., help="One checkpoint per seed."),
    sets: Path = SETS,
    settings: list[str] = typer.Option([], "--set", help="decode.* settings for every decoding."),
    device: str = typer.Option("cpu", help="cpu, cuda or auto."),
    only: list[str] = typer.Option([], "--only", help="Only the conditions matching these patterns, and clean."),
) -> None:
    """CER per condition and decoding, over the checkpoints (seeds)."""
    names = ["clean", *[name for name in CONDITIONS[1:] if matches(name, only)]]
    results = [measure_checkpoint(checkpoint, sets, settings, device, names) for checkpoint in checkpoints]
    rates = {
        (decoding, name): [result["rates"][decoding][name] for result in results]
        for decoding in DECODINGS
        for name in names
    }
    overruns = {name: max(result["overruns"][name] for result in results) for name in results[0]["overruns"]}
    print(f"{len(checkpoints)} checkpoint(s); CER % as mean (min-max); x clean: ratio of means\n")
    print("| condition | greedy CER | x clean | beam CER | x clean | greedy: longest vs 1.5 ref + 5 |")
    print("| --- | --- | --- | --- | --- | --- |")
    clean = {decoding: statistics.mean(rates[(decoding, "clean")]) for decoding in DECODINGS}
    for name in names:
        greedy, beam = rates[("greedy", name)], rates[("beam", name)]
        print(
            f"| {name} | {summary(greedy)} | {statistics.mean(greedy) / clean['greedy']:.2f} | {summary(beam)} | "
            f"{statistics.mean(beam) / clean['beam']:.2f} | {overruns[name]:+d} |"
        )
    for identifier in sorted(set(overruns) - set(CONDITIONS)):
        print(f"| {identifier} (no speech) | | | | | {overruns[identifier]} characters at most |")


SURROUNDINGS = ROOT / "runs" / "robustness" / "surroundings"
PADDING = [
    f"{kind}-{seconds:g}-{side}"
    for kind in ("silence", "background")
    for seconds in (0.5, 1, 3)
    for side in ("start", "end", "both")
]
# What recorders and lines put around the speech besides silence and the room's background.
SOUNDS = ["dither-1-both", "hum-1-both", "beep-start", "beep-end", "quiet-30", "quiet-40", "click-start", "click-end"]
WORDS_PADDED = ["silence-0.5-both", "background-0.5-both"]  # single words as a padded clip or a phone app has them
CROPS = ["tight", "words", "words-telephone", *[f"words-{condition}" for condition in WORDS_PADDED]]
# Two consecutive dev recordings in one, with a pause between them (`joined`).
GAPS = ["gap-silence-0", "gap-silence-1", "gap-silence-3", "gap-background-1", "gap-background-3"]
HUM_DBFS = -45.0  # RMS of `hum-1-both`'s mains hum: 50 Hz and 3 harmonics
BEEP_DBFS = -23.0  # RMS of the beeps' 1 kHz tone (0.5 s), with 0.3 s of background either side
CLICK_DBFS = -20.0  # RMS of a record button's click (5 ms of decaying noise)


def padded(
    waveform: torch.Tensor, condition: str, generator: torch.Generator, source: torch.Tensor | None = None
) -> torch.Tensor:
    """`waveform` with the surroundings `condition` names: KIND-SECONDS-SIDE; a background is
    `source`'s own (the recording a word was cut from: a tight clip has none), else the waveform's."""
    kind, seconds, side = condition.split("-")
    samples = round(float(seconds) * RATE)
    recording = waveform if source is None else source

    def around() -> torch.Tensor:
        return torch.zeros(samples) if kind == "silence" else own_background(recording, samples, RATE, generator)

    before = around() if side in ("start", "both") else torch.zeros(0)
    after = around() if side in ("end", "both") else torch.zeros(0)
    return torch.cat([before, waveform, after])


def joined(first: torch.Tensor, second: torch.Tensor, condition: str, generator: torch.Generator) -> torch.Tensor:
    """Two recordings `(samples,)` in one, with the pause of `condition` (of GAPS) between them:
    digital silence, or the first one's own background, as a speaker pausing between two
    sentences of one recording."""
    _, kind, seconds = condition.split("-")
    samples = round(float(seconds) * RATE)
    gap = torch.zeros(samples) if kind == "silence" else own_background(first, samples, RATE, generator)
    return torch.cat([first, gap, second])


def sounded(waveform: torch.Tensor, condition: str, generator: torch.Generator) -> torch.Tensor:
    """`waveform` with the `condition` of SOUNDS: 1 s at each end of an export's dither (16-bit
    triangular, +-1 step) instead of exact zeros; 1 s of digital silence at each end, mains hum
    under all of it; a voicemail's beep or a record button's click before or after it, in its own
    background; or quieter (written in 16 bits, as every set is)."""
    if condition.startswith("quiet-"):
        return waveform * 10 ** (-float(condition.split("-")[1]) / 20)
    if condition.startswith("click-"):
        burst = torch.randn(RATE // 200, generator=generator) * torch.linspace(1, 0, RATE // 200) ** 2
        click = burst * (10 ** (CLICK_DBFS / 20) / power(burst).sqrt())
        near, far = (own_background(waveform, round(seconds * RATE), RATE, generator) for seconds in (0.3, 0.1))
        around = torch.cat([far, click + own_background(waveform, len(click), RATE, generator), near])
        return torch.cat([around, waveform] if condition == "click-start" else [waveform, around.flip(0)])
    second = torch.zeros(RATE)
    if condition == "dither-1-both":
        steps = [torch.rand(RATE, generator=generator) - torch.rand(RATE, generator=generator) for _ in range(2)]
        return torch.cat([steps[0] / 32768, waveform, steps[1] / 32768])
    if condition == "hum-1-both":
        whole = torch.cat([second, waveform, second])
        mains = hum(len(whole), RATE, frequency=50.0, harmonics=4)
        return whole + mains * (10 ** (HUM_DBFS / 20) / power(mains).sqrt())
    tone = torch.sin(2 * math.pi * 1000 * torch.arange(RATE // 2) / RATE) * 10 ** (BEEP_DBFS / 20) * math.sqrt(2)
    gap, lead = (own_background(waveform, round(0.3 * RATE), RATE, generator) for _ in range(2))
    beep = torch.cat([lead, tone, gap])
    return torch.cat([beep, waveform] if condition == "beep-start" else [waveform, beep.flip(0)])


def reference_words(recognizer: Recognizer, waveform: torch.Tensor, text: str) -> list[tuple[int, int, str]]:
    """`(start, end, word)` in samples of each word of the reference `text` in `waveform` (`las align`)."""
    words = align(recognizer, recognizer.array_features(waveform, RATE), text)
    return [(round(word.start * RATE), round(word.end * RATE), word.word) for word in words]


@app.command("build-surroundings")
def build_surroundings(
    checkpoint: Path,
    out: Path = SURROUNDINGS,
    seed: int = 0,
    only: list[str] = typer.Option([], "--only", help="Only the sets matching these patterns (e.g. 'hum*')."),
    source: Path = typer.Option(DEV, help="The utterances to surround (scripts/tuning.py: the choosing speakers)."),
) -> None:
    """Write the surroundings sets; word edges from `checkpoint`'s CTC head. Every set draws as
    in a whole build, whichever are written."""
    recognizer = Recognizer.load(checkpoint, device="cpu", speed=1.0)  # aligned as `las align` aligns
    generator = torch.Generator().manual_seed(seed)
    words_generator = torch.Generator().manual_seed(seed + 1)  # apart: the utterances' sets draw as before
    sounds_generator = torch.Generator().manual_seed(seed + 2)
    clicks_generator = torch.Generator().manual_seed(seed + 3)  # apart: the sounds before them draw as before
    gaps_generator = torch.Generator().manual_seed(seed + 4)
    names = [name for name in PADDING + SOUNDS + CROPS + GAPS if matches(name, only)]
    sets: dict[str, list[tuple[str, torch.Tensor, str]]] = {name: [] for name in PADDING + SOUNDS + CROPS + GAPS}
    previous = ("", torch.zeros(0), "")
    for position, (identifier, audio, _, text) in enumerate(dev_rows(source)):
        waveform = load_audio(source.parent / audio, RATE)
        for condition in PADDING:
            sets[condition].append((identifier, padded(waveform, condition, generator), text))
        for condition in SOUNDS:
            drawing = clicks_generator if condition.startswith("click-") else sounds_generator
            sets[condition].append((identifier, sounded(waveform, condition, drawing), text))
        if position % 2:  # with the recording before it
            first_identifier, first, first_text = previous
            for condition in GAPS:
                pair = joined(first, waveform, condition, gaps_generator)
                sets[condition].append((f"{first_identifier}+{identifier}", pair, f"{first_text} {text}"))
        previous = identifier, waveform, text
        if not set(names) & set(CROPS):
            continue  # no alignment needed
        words = reference_words(recognizer, waveform, text)
        sets["tight"].append((identifier, waveform[words[0][0] : words[-1][1]], text))
        for index, (start, end, word) in enumerate(words):
            clip = waveform[start:end]
            sets["words"].append((f"{identifier}-{index}", clip, word))
            sets["words-telephone"].append((f"{identifier}-{index}", telephone(clip, RATE), word))
            for condition in WORDS_PADDED:
                sets[f"words-{condition}"].append(
                    (f"{identifier}-{index}", padded(clip, condition, words_generator, waveform), word)
                )
    for name in names:
        write_set(out, name, sets[name])


def matches(name: str, patterns: list[str]) -> bool:
    """Whether a set is one of `patterns` (fnmatch); every set where there are none."""
    return not patterns or any(fnmatch.fnmatch(name, pattern) for pattern in patterns)


def kept(checkpoint: Path, kind: str, settings: list[str], compute: Callable[[], dict]) -> dict:
    """`compute()`'s results for a checkpoint, kept beside it in CHECKPOINT.KIND.json keyed by the
    settings, the checkpoint's time and las's code: seeds measured by separate processes are then
    tabled together at once, and nothing measured with other code is reused."""
    record = checkpoint.with_suffix(f".{kind}.json")
    key = f"{checkpoint.stat().st_mtime_ns} {CODE} {' '.join(settings)}"
    saved = json.loads(record.read_text()) if record.exists() else {}
    if key not in saved:
        saved[key] = compute()
        write_text_atomically(record, json.dumps(saved, indent=1))
    return saved[key]


DIGITS = {"ZERO", "OH", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE"}
WORD_KINDS = ("spelled letters", "digits", "other words")


def word_kind(word: str) -> str:
    """Which kind of single word a clip holds: AN4 spells letters, reads digits and numbers, and
    has a few commands."""
    return WORD_KINDS[0] if len(word) == 1 else WORD_KINDS[1] if word in DIGITS else WORD_KINDS[2]


def share_right(hypotheses: dict[str, str], references: dict[str, str]) -> float:
    """% of the references decoded exactly."""
    return 100 * statistics.mean(hypotheses[key] == text for key, text in references.items())


def surroundings_rates(
    checkpoint: Path, sets: Path, settings: list[str], device: str, names: list[str]
) -> dict[str, dict]:
    """CER of the unpadded dev set and of each surroundings set of `names`, and the share of
    recordings decoded right (single words too by kind), each set kept apart (`kept`), so that a
    later call for more sets reuses these."""

    def compute(name: str) -> dict[str, float]:
        manifest = DEV if name == "unpadded" else sets / f"{name}.tsv"
        hypotheses = transcribe(checkpoint, manifest, settings, device)
        references = read_transcripts(manifest)
        result = {"rate": character_error_rate(hypotheses, manifest), "right": share_right(hypotheses, references)}
        if name.startswith("words"):
            for kind in WORD_KINDS:
                mine = {key: text for key, text in references.items() if word_kind(text) == kind}
                result[f"right: {kind}"] = share_right(hypotheses, mine)
        return result

    def key(name: str) -> str:  # which build of the set: a rebuild (other word edges, say) is measured anew
        manifest = (DEV if name == "unpadded" else sets / f"{name}.tsv").resolve()
        return f"({name}: {manifest} {manifest.stat().st_mtime_ns})"

    # One record per set: the set joins the settings in the key.
    found = {name: kept(checkpoint, "surroundings", [*settings, key(name)], partial(compute, name)) for name in names}
    rates = {name: result["rate"] for name, result in found.items()}
    right = {name: result["right"] for name, result in found.items()}
    for name, result in found.items():
        right |= {f"{name}: {kind}": result[f"right: {kind}"] for kind in WORD_KINDS if f"right: {kind}" in result}
    return {"rates": rates, "right": right}


@app.command("surroundings")
def measure_surroundings(
    checkpoints: list[Path] = typer.Argument(..., help="One checkpoint per seed."),
    sets: Path = SURROUNDINGS,
    settings: list[str] = typer.Option([], "--set", help="decode.* (or features.*) settings for every decoding."),
    device: str = typer.Option("cpu", help="cpu, cuda or auto."),
    only: list[str] = typer.Option([], "--only", help="Only the sets matching these patterns (e.g. 'words*')."),
) -> None:
    """CER per surroundings condition with the default decoding, over the checkpoints (seeds)."""
    names = ["unpadded"] + [name for name in PADDING + SOUNDS + CROPS + GAPS if matches(name, only)]
    results = [surroundings_rates(checkpoint, sets, settings, device, names) for checkpoint in checkpoints]
    unpadded = statistics.mean(result["rates"]["unpadded"] for result in results)
    print(f"{len(checkpoints)} checkpoint(s); CER % as mean (min-max); x unpadded: ratio of means\n")
    print("| condition | CER | x unpadded | recordings exactly right, % |")
    print("| --- | --- | --- | --- |")
    for name in names:
        rates = [result["rates"][name] for result in results]
        right = summary([result["right"][name] for result in results]) if name != "unpadded" else ""
        print(f"| {name} | {summary(rates)} | {statistics.mean(rates) / unpadded:.2f} | {right} |")
    for name in [f"{crop}: {kind}" for crop in names if crop.startswith("words") for kind in WORD_KINDS]:
        print(f"| {name} | | | {summary([result['right'][name] for result in results])} |")


NOISES: dict[str, Callable[[int, torch.Generator], torch.Tensor]] = {
    "white": white_noise,
    "pink": pink_noise,
    "brown": brown_noise,
    "hum": lambda samples, generator: hum(samples, RATE),
}


def contrast_sources(sets: Path) -> dict[str, Iterator[torch.Tensor]]:
    """Waveforms per condition: all of AN4, the built sets, dev in each of NOISES at 0 dB, and
    recordings without speech (each noise alone, silence, a tone: 3, 12 and 40 s, 3 seeds)."""
    folders = {"clean (all of AN4: train and dev)": DEV.parent / "audio"}
    folders |= {path.name: path for path in sorted(sets.iterdir()) if path.is_dir()} if sets.is_dir() else {}
    sources = {name: read_all(sorted(folder.glob("*.flac"))) for name, folder in folders.items()}
    dev = [DEV.parent / audio for _, audio, _, _ in dev_rows()]
    sources |= {f"{kind}-0 (dev)": in_noise(dev, noise) for kind, noise in NOISES.items()}
    lengths = [seconds * RATE for seconds in (3, 12, 40) for _ in range(3)]
    sources |= {f"no speech: {kind} noise": alone(noise, lengths) for kind, noise in NOISES.items()}
    sources["no speech: silence, a tone"] = itertools.chain(
        (torch.zeros(length) for length in lengths[::3]),
        (0.3 * torch.sin(torch.arange(length) * 0.1) for length in lengths[::3]),
    )
    return sources


def read_all(paths: list[Path]) -> Iterator[torch.Tensor]:
    return (load_audio(path, RATE) for path in paths)


def in_noise(paths: list[Path], noise: Callable[[int, torch.Generator], torch.Tensor]) -> Iterator[torch.Tensor]:
    for index, path in enumerate(paths):
        yield add_noise(load_audio(path, RATE), noise(10 * RATE, torch.Generator().manual_seed(index)), 0)


def alone(noise: Callable[[int, torch.Generator], torch.Tensor], lengths: list[int]) -> Iterator[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    for length in lengths:
        waveform = noise(length, generator)
        yield 0.3 * waveform / waveform.abs().max()


@app.command()
def contrast(sets: Path = SETS) -> None:
    """Per condition, how far frame energy and band activity rise from their floor (95th - 5th
    percentile, in nats), by which `las.data.front_end.segmentation.has_speech` tells speech from silence, tones
    and steady noise: recordings under BAND_CONTRAST, or under SPEECH_CONTRAST and SPEECH_BANDS,
    are not decoded at all, so no speech should fall there and nothing else above them."""
    extractor = FilterbankExtractor(FeatureConfig())
    print(
        f"| condition | recordings | energy: min | median | max | bands: min | median | max "
        f"| not decoded (bands < {BAND_CONTRAST}, or energy < {SPEECH_CONTRAST} and bands < {SPEECH_BANDS}) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, waveforms in contrast_sources(sets).items():
        levels = [Levels.of(log_mel_features(extractor, waveform, name)) for waveform in waveforms]
        energy, bands = (sorted(values) for values in zip(*(level.contrasts for level in levels), strict=True))
        cells = [f"{values[0]:.2f} | {statistics.median(values):.2f} | {values[-1]:.2f}" for values in (energy, bands)]
        silent = sum(not level.speech for level in levels)
        print(f"| {name} | {len(levels)} | {cells[0]} | {cells[1]} | {silent} |", flush=True)


if __name__ == "__main__":
    app()
