"""Long recordings: accuracy, timestamps and scale of `Recognizer` on AN4 dev joined into minutes.

    python scripts/longform.py build                          # the long-form sets, once
    python scripts/longform.py measure runs/an4/best.pt ...   # accuracy and timestamps, per seed
    python scripts/longform.py scale runs/an4/best.pt         # 5 and 10 minutes: RTF, peak memory
    python scripts/longform.py channels runs/an4/best.pt      # in noise and through a phone line
    python scripts/longform.py sparse runs/an4/best.pt        # a few words in a long noise

`build` writes under `runs/longform/sets/`:

    speakers.tsv     per dev speaker, all their utterances joined with 0.5 s of digital silence
                     (30-55 s each); the reference is the joined text
    starts.json      per speaker, where each utterance starts in the joined file, where its
                     speech starts (`speech_onset`) and its first frame above the energy threshold
                     of las.data.front_end.segmentation
    minutes-5.flac   the whole dev set joined the same way (5.2 minutes), and twice over (10.4)
    minutes-10.flac

`measure` decodes each speaker's file three ways with the default decoding: its utterances one by
one (the reference point), the joined file as `las decode` does (cut at pauses), and the joined
file whole (`decode.segment_seconds` beyond its length), and prints the CER of each; then the
error of the start time of each utterance's first word (only where that word was decoded right)
against its speech onset, its first loud frame (a click or breath before the speech counts) and
its start in the file. `scale` decodes the 5- and 10-minute files
in fresh processes and prints real-time factor and peak resident memory. `channels` decodes the
joined files in noise and through a telephone line: cut at pauses (las), cut where the total frame
energy alone finds pauses (the pause finder before band activity), whole, and at the true
utterance boundaries; and how much of the clean recordings' speech each pause finder left out.
"""

from __future__ import annotations

import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from unittest import mock

import Levenshtein
import soundfile
import torch
import typer
from harness import header, read_manifest

from las import Recognizer
from las.core.config import FeatureConfig
from las.core.metrics import character_error_rate
from las.data.augmentation.channel_effects import brown_noise, pink_noise, power, telephone, white_noise
from las.data.front_end.features import FilterbankExtractor
from las.data.front_end.segmentation import (
    SHORTEST_FRAMES,
    SPEECH_CONTRAST,
    cut_to_length,
    digital_silence,
    energy_range,
    frame_energy,
    loud_regions,
    quiet_frames,
    runs,
    split_at_pauses,
)
from las.data.front_end.signal import lowpass
from las.model.checkpoint import load_checkpoint
from las.recognition.recognizer import Result

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "data" / "an4" / "dev.tsv"
SETS = ROOT / "runs" / "longform" / "sets"
RATE = 16000
GAP_SECONDS = 0.5
HOP = 160  # samples per feature frame (10 ms)
WHOLE_SECONDS = 100_000  # decode.segment_seconds longer than any recording: decoded in one piece

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def dev_rows(manifest: Path = DEV) -> list[tuple[str, Path, str]]:
    """(id, audio, text) of AN4 dev (or another manifest of AN4's naming), in manifest order."""
    return [(identifier, manifest.parent / audio, text) for identifier, audio, _, text in read_manifest(manifest)[1]]


def speech_onset(waveform: torch.Tensor, extractor: FilterbankExtractor) -> tuple[float, float]:
    """Seconds to the utterance's speech onset, and to its first loud frame (above the quiet
    threshold of las.data.front_end.segmentation). The onset is the start of the first 0.1 s that stays above
    the middle of the utterance's energy range, moved back through the loud frames just before
    it (the weak start of an "s" or "h"). Most AN4 utterances open with the click of the
    push-to-talk button, a burst and a 0.1-0.3 s decay above the quiet threshold; in 31 of dev's
    100 the first loud frame comes 0.25-0.8 s before the speech."""
    energy = frame_energy(extractor(waveform))
    floor, peak = energy_range(energy)
    quiet = quiet_frames(energy, floor, peak)
    strong = [start for start, end in runs(energy >= (floor + peak) / 2) if end - start >= SHORTEST_FRAMES]
    loud = (~quiet).nonzero().flatten().tolist()
    if not strong or not loud:
        return 0.0, 0.0
    onset = strong[0]
    while onset > 0 and not quiet[onset - 1]:
        onset -= 1
    seconds = extractor.config.hop_ms / 1000
    return onset * seconds, loud[0] * seconds


def joined(waveforms: list[torch.Tensor]) -> tuple[torch.Tensor, list[float]]:
    """The waveforms one after another with GAP_SECONDS of silence between, and their starts."""
    gap = torch.zeros(round(GAP_SECONDS * RATE))
    pieces, starts, position = [], [], 0
    for waveform in waveforms:
        starts.append(position / RATE)
        pieces += [waveform, gap]
        position += len(waveform) + len(gap)
    return torch.cat(pieces[:-1]), starts


@app.command()
def build(out: Path = SETS, source: Path = DEV) -> None:
    """Write the long-form sets (of another manifest's speakers with `--source`: the choosing
    speakers', data/an4/tuning.tsv, to choose a setting for long recordings on)."""
    out.mkdir(parents=True, exist_ok=True)
    extractor = FilterbankExtractor(FeatureConfig())
    rows = dev_rows(source)
    audio = {identifier: torch.from_numpy(soundfile.read(path, dtype="float32")[0]) for identifier, path, _ in rows}
    by_speaker: dict[str, list[tuple[str, str]]] = {}
    for identifier, _, text in rows:
        by_speaker.setdefault(identifier.split("-")[1], []).append((identifier, text))
    lines, starts = ["id\tpath\tduration_s\ttext"], {}
    for speaker, utterances in by_speaker.items():
        waveform, utterance_starts = joined([audio[identifier] for identifier, _ in utterances])
        soundfile.write(out / f"{speaker}.flac", waveform.numpy(), RATE, subtype="PCM_16")
        text = " ".join(text for _, text in utterances)
        lines.append(f"{speaker}\t{speaker}.flac\t{len(waveform) / RATE:.2f}\t{text}")
        starts[speaker] = []
        for (identifier, _), start in zip(utterances, utterance_starts, strict=True):
            speech, first_loud = speech_onset(audio[identifier], extractor)
            times = {"start": start, "speech": round(start + speech, 3), "first_loud": round(start + first_loud, 3)}
            starts[speaker].append({"id": identifier, **times})
    (out / "speakers.tsv").write_text("\n".join(lines) + "\n")
    (out / "starts.json").write_text(json.dumps(starts, indent=1) + "\n")
    everything, _ = joined(list(audio.values()))
    for minutes, waveform in ((5, everything), (10, torch.cat([everything, torch.zeros(RATE // 2), everything]))):
        soundfile.write(out / f"minutes-{minutes}.flac", waveform.numpy(), RATE, subtype="PCM_16")
    print(
        f"{len(by_speaker)} speakers, {len(everything) / RATE / 60:.1f} and {2 * len(everything) / RATE / 60:.1f} min"
    )


REFERENCES = {"speech": "speech onset", "first_loud": "first loud frame", "start": "utterance start"}


def first_word_errors(result: Result, utterances: list[dict], references: list[str]) -> dict[str, list[float]]:
    """Seconds (late: positive) from each utterance's first reference word to the start of the
    word decoded right and aligned to it, against each of REFERENCES."""
    reference_words = " ".join(references).split()
    hypothesis_words = [word.word for word in result.words]
    aligned = {}
    for operation, first, last, hypothesis_first, _ in Levenshtein.opcodes(reference_words, hypothesis_words):
        if operation == "equal":
            for offset in range(last - first):
                aligned[first + offset] = hypothesis_first + offset
    errors: dict[str, list[float]] = {key: [] for key in REFERENCES}
    position = 0
    for utterance, text in zip(utterances, references, strict=True):
        if position in aligned and aligned[position] < len(result.words):
            decoded = result.words[aligned[position]].start
            for key, values in errors.items():
                values.append(decoded - utterance[key])
        position += len(text.split())
    return errors


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


@app.command()
def measure(
    checkpoints: list[Path] = typer.Argument(..., help="One checkpoint per seed."),
    sets: Path = SETS,
    noise_db: float | None = typer.Option(None, help="White noise at this SNR on the joined recordings."),
    settings: list[str] = typer.Option([], "--set", help="decode.* settings for every decoding."),
) -> None:
    """CER one by one, long-form (cut at pauses) and whole; first-word start errors of word times
    from CTC alignment and from attention peaks. With --noise-db, the joined recordings carry
    white noise (scored against the clean references and onsets)."""
    starts = json.loads((sets / "starts.json").read_text())
    speakers = [line.split("\t") for line in (sets / "speakers.tsv").read_text().splitlines()[1:]]
    texts = {identifier: text for identifier, _, text in dev_rows()}
    rows = []
    errors: dict[tuple[str, str], list[float]] = {}  # (word times, against what) -> signed seconds
    for checkpoint in checkpoints:
        loaded = load_checkpoint(checkpoint)
        recognizers = {
            method: Recognizer(loaded, "cpu", [*settings, f"decode.word_times={method}"])
            for method in ("ctc", "attention")
        }
        whole = Recognizer(loaded, "cpu", [*settings, f"decode.segment_seconds={WHOLE_SECONDS}"])
        one_by_one = {result.id: result.text for result in recognizers["ctc"].transcribe(DEV)}
        references, separate, long_form, in_one_piece = [], [], [], []
        for speaker, path, _, reference in speakers:
            utterances = starts[speaker]
            references.append(reference)
            separate.append(" ".join(one_by_one[utterance["id"]] for utterance in utterances))
            audio = in_noise(sets / path, noise_db, white_noise)
            in_one_piece.append(whole.transcribe(audio, RATE).text)
            for method, recognizer in recognizers.items():
                result = recognizer.transcribe(audio, RATE)
                if method == "ctc":
                    long_form.append(result.text)
                found = first_word_errors(result, utterances, [texts[item["id"]] for item in utterances])
                for key, values in found.items():
                    errors.setdefault((method, REFERENCES[key]), []).extend(values)
        rows.append(
            [character_error_rate(hypotheses, references) for hypotheses in (separate, long_form, in_one_piece)]
        )
        print(f"{checkpoint}: one by one {rows[-1][0]:.2f}%, long-form {rows[-1][1]:.2f}%, whole {rows[-1][2]:.2f}%")
    means = [statistics.mean(column) for column in zip(*rows, strict=True)]
    print(f"\n{len(checkpoints)} checkpoint(s), {len(speakers)} recordings of 30-55 s, default decoding:\n")
    print(header("decoding", "CER %", "x one by one"))
    names = ("utterances one by one", "long-form, cut at pauses (default)", "long-form, whole")
    for name, value in zip(names, means, strict=True):
        print(f"| {name} | {value:.2f} | {value / means[0]:.2f} |")
    total = sum(len(starts[speaker]) for speaker, *_ in speakers) * len(checkpoints)
    print(f"\nfirst-word start error (utterances whose first word was decoded right, of {total}):\n")
    print(
        header(
            "word times", "against", "utterances", "median s", "90th percentile s", "within 0.25 s", "median signed s"
        )
    )
    for (method, against), signed in errors.items():
        absolute = [abs(error) for error in signed]
        close = 100 * sum(error <= 0.25 for error in absolute) / len(absolute)
        print(
            f"| {method} | {against} | {len(signed)} | {statistics.median(absolute):.3f} | "
            f"{percentile(absolute, 0.9):.3f} | {close:.0f}% | {statistics.median(signed):+.3f} |"
        )


def whole_against_one_by_one(checkpoint: Path, sets: Path = SETS, **settings: object) -> tuple[float, float]:
    """CER (%) of AN4 dev decoded utterance by utterance, and of every speaker's joined recording
    decoded whole (no segmentation), with the decode `settings` over the defaults."""
    speakers = [line.split("\t") for line in (sets / "speakers.tsv").read_text().splitlines()[1:]]
    texts = {identifier: text for identifier, _, text in dev_rows()}
    separate = Recognizer.load(checkpoint, "cpu", **settings).transcribe(DEV)
    whole = Recognizer.load(checkpoint, "cpu", **{**settings, "segment_seconds": WHOLE_SECONDS})
    one_by_one = character_error_rate([result.text for result in separate], [texts[result.id] for result in separate])
    in_one_piece = [whole.transcribe(sets / path).text for _, path, _, _ in speakers]
    return one_by_one, character_error_rate(in_one_piece, [reference for *_, reference in speakers])


def in_noise(path: Path, snr_db: float | None, noise: Callable[[int, torch.Generator], torch.Tensor]) -> torch.Tensor:
    """The recording's samples with `noise` `snr_db` below its speech's power (the power of its
    samples that are not digital silence; none if None), the same noise every run."""
    samples = torch.from_numpy(soundfile.read(path, dtype="float32")[0])
    if snr_db is None:
        return samples
    added = noise(len(samples), torch.Generator().manual_seed(0))
    return samples + added * (power(samples[samples != 0]) / (power(added) * 10 ** (snr_db / 10))).sqrt()


CHANNELS: dict[str, Callable[[Path], torch.Tensor]] = {
    "clean": lambda path: in_noise(path, None, white_noise),
    **{f"white noise {snr} dB": partial(in_noise, snr_db=snr, noise=white_noise) for snr in (20, 10, 5, 0)},
    **{f"pink noise {snr} dB": partial(in_noise, snr_db=snr, noise=pink_noise) for snr in (10, 0)},
    "telephone": lambda path: telephone(in_noise(path, None, white_noise), RATE),
    "white noise 10 dB, telephone": lambda path: telephone(in_noise(path, 10, white_noise), RATE),
}


def energy_only_spans(features: torch.Tensor, max_frames: int) -> list[tuple[int, int]]:
    """`split_at_pauses` as it was before band activity: pauses of 0.3 s where the total frame
    energy alone is quiet (the baseline of `channels`)."""
    energy = frame_energy(features)
    floor, peak = energy_range(energy)
    if peak - floor < SPEECH_CONTRAST:
        return []
    quiet = quiet_frames(energy, floor, peak)
    regions = loud_regions(quiet, pause_frames=30)
    return [span for start, end in regions for span in cut_to_length(energy, start, end, max_frames)]


def speech_left_out(spans: list[tuple[int, int]], clean: torch.Tensor) -> tuple[int, int]:
    """Frames of speech outside `spans`, and frames of speech: speech being the frames of the
    clean recording's features `clean` `(frames, mel_bins)` above the middle of its energy range
    (digital silence left out)."""
    energy = frame_energy(clean)
    heard = ~digital_silence(energy, clean.shape[1])
    floor, peak = energy_range(energy[heard])
    speech = (energy > (floor + peak) / 2) & heard
    return int((speech & ~covering(spans, len(speech))).sum()), int(speech.sum())


def covering(spans: list[tuple[int, int]], frames: int) -> torch.Tensor:
    """`(frames,)` True inside any of the `[start, end)` spans."""
    covered = torch.zeros(frames, dtype=torch.bool)
    for start, end in spans:
        covered[start:end] = True
    return covered


@app.command()
def channels(checkpoint: Path, sets: Path = SETS, threads: int = 1) -> None:
    """CER of the joined recordings in noise and through a telephone line, decoded four ways, and
    the share of their speech frames each pause finder left out (see the module's docstring)."""
    torch.set_num_threads(threads)
    speakers = [line.split("\t") for line in (sets / "speakers.tsv").read_text().splitlines()[1:]]
    starts = json.loads((sets / "starts.json").read_text())
    references = [reference for *_, reference in speakers]
    recognizer = Recognizer.load(checkpoint, "cpu")
    whole = Recognizer.load(checkpoint, "cpu", segment_seconds=WHOLE_SECONDS)
    longest = round(recognizer.config.decode.segment_seconds * 1000 / recognizer.config.features.hop_ms)
    clean = [recognizer.array_features(CHANNELS["clean"](sets / path), RATE) for _, path, *_ in speakers]
    finders = {"las (bands)": split_at_pauses, "total energy alone (before)": energy_only_spans}
    print(f"{checkpoint}, {len(speakers)} recordings of 30-55 s, default decoding, CER %; speech frames left out:\n")
    print(
        "| channel | cut at pauses: las | cut: energy alone (before) | whole | true utterances "
        "| speech left out: las | energy alone |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for channel, make in CHANNELS.items():
        features = [recognizer.array_features(make(sets / path), RATE) for _, path, *_ in speakers]
        ids = [speaker for speaker, *_ in speakers]
        cells, left_out = [], []
        for finder in finders.values():
            with mock.patch("las.recognition.recognizer.split_at_pauses", finder):
                cells.append(
                    character_error_rate([item.text for item in recognizer.recognize(ids, features)], references)
                )
            counts = [
                speech_left_out(finder(item, longest), reference)
                for item, reference in zip(features, clean, strict=True)
            ]
            left_out.append(100 * sum(lost for lost, _ in counts) / sum(total for _, total in counts))
        cells.append(character_error_rate([item.text for item in whole.recognize(ids, features)], references))
        texts = []
        for (speaker, *_), item in zip(speakers, features, strict=True):
            bounds = [round(utterance["start"] * RATE) // HOP for utterance in starts[speaker]]
            ends = [bound - round(GAP_SECONDS * RATE) // HOP for bound in bounds[1:]] + [len(item)]
            pieces = [item[start:end] for start, end in zip(bounds, ends, strict=True)]
            found = recognizer.recognize([str(index) for index in range(len(pieces))], pieces, [False] * len(pieces))
            texts.append(" ".join(result.text for result in found if result.text))
        cells.append(character_error_rate(texts, references))
        print(
            f"| {channel} | "
            + " | ".join(f"{value:.2f}" for value in cells)
            + " | "
            + " | ".join(f"{value:.1f}%" for value in left_out)
            + " |",
            flush=True,
        )


def car_noise(samples: int, generator: torch.Generator) -> torch.Tensor:
    """White noise low-passed at 200 Hz: the rumble of a car, a ventilation, a room's machines."""
    return lowpass(white_noise(samples, generator), RATE, 200.0)


SPARSE_NOISES = {"car (under 200 Hz)": car_noise, "brown": brown_noise, "pink": pink_noise, "white": white_noise}


@app.command()
def sparse(checkpoint: Path, pairs: int = 6, threads: int = 1) -> None:
    """A few words in a long noise: two dev utterances in 40 s of noise (10 s of it before the
    first, 15 s between, 10 s after) at 10 and 0 dB under the words' power, `pairs` such
    recordings per condition. Per pause finder, the share of the noise (farther than 0.3 s from
    the words) decoded as if it were speech, and the CER against the two utterances."""
    torch.set_num_threads(threads)
    recognizer = Recognizer.load(checkpoint, "cpu")
    rows = dev_rows()[: 2 * pairs]
    waveforms = [torch.from_numpy(soundfile.read(path, dtype="float32")[0]) for _, path, _ in rows]
    finders = {"las": split_at_pauses, "energy alone (before)": energy_only_spans}
    print(f"{checkpoint}: {pairs} recordings per condition, default decoding\n")
    print(header("noise", "SNR dB", "noise decoded: las", "energy alone", "CER %: las", "energy alone"))
    for name, noise in SPARSE_NOISES.items():
        for snr in (10, 0):
            kept = {finder: [0, 0] for finder in finders}
            texts: dict[str, list[str]] = {finder: [] for finder in finders}
            references = []
            for pair in range(pairs):
                first, second = waveforms[2 * pair], waveforms[2 * pair + 1]
                gaps = [torch.zeros(seconds * RATE) for seconds in (10, 15, 10)]
                clean = torch.cat([gaps[0], first, gaps[1], second, gaps[2]])
                added = noise(len(clean), torch.Generator().manual_seed(pair))
                words = torch.cat([first, second])
                noisy = clean + added * (power(words) / (power(added) * 10 ** (snr / 10))).sqrt()
                features = recognizer.array_features(noisy, RATE)
                starts = [len(gaps[0]) // HOP, (len(gaps[0]) + len(first) + len(gaps[1])) // HOP]
                away = torch.ones(len(features), dtype=torch.bool)  # farther than 0.3 s from the words
                for start, length in zip(starts, (len(first) // HOP, len(second) // HOP), strict=True):
                    away[max(0, start - 30) : start + length + 30] = False
                references.append(f"{rows[2 * pair][2]} {rows[2 * pair + 1][2]}")
                for finder_name, finder in finders.items():
                    covered = covering(finder(features, len(features)), len(features))
                    kept[finder_name][0] += int((covered & away).sum())
                    kept[finder_name][1] += int(away.sum())
                    with mock.patch("las.recognition.recognizer.split_at_pauses", finder):
                        texts[finder_name].append(recognizer.recognize(["sparse"], [features])[0].text)
            shares = [f"{100 * inside / total:.1f}%" for inside, total in kept.values()]
            errors = [f"{character_error_rate(found, references):.1f}" for found in texts.values()]
            print(f"| {name} | {snr} | {' | '.join(shares)} | {' | '.join(errors)} |", flush=True)


@app.command()
def scale(checkpoint: Path, sets: Path = SETS) -> None:
    """Real-time factor and peak memory on 5 and 10 minutes, each in a fresh process, 2 threads."""
    for minutes in (5, 10):
        command = [sys.executable, __file__, "one-recording", str(checkpoint), str(sets / f"minutes-{minutes}.flac")]
        print(f"{minutes} min: {subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()}")


@app.command(name="one-recording")
def one_recording(checkpoint: Path, audio: Path) -> None:
    torch.set_num_threads(2)
    cache = tempfile.mkdtemp()  # features computed here, not found in a warm cache
    recognizer = Recognizer(load_checkpoint(checkpoint), "cpu", [f"data.cache_dir={cache}"])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    result = recognizer.transcribe(audio)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    timing = recognizer.timing
    print(
        f"{timing.audio_seconds:.0f} s of audio, {len(result.segments)} segments, decoded in {timing.seconds:.1f} s "
        f"(real-time factor {timing.real_time_factor:.3f}; {seconds / timing.audio_seconds:.3f} with reading and "
        f"features); peak RSS {peak:.0f} MB ({before:.0f} MB after loading)"
    )
    shutil.rmtree(cache)


if __name__ == "__main__":
    app()
