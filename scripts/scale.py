"""A corpus of HW4P2's size built from AN4, for measuring las at scale (issue 27).

    python scripts/scale.py build                 # runs/scale: train (28,539) and dev recordings
    python scripts/scale.py padding               # the share of padding, batched by count and by frames
    python scripts/scale.py rows --rows 1000000   # runs/scale/rows-1000000.tsv: symlinks, for start-up
    python scripts/scale.py startup data/an4/train.tsv runs/scale/rows-1000000.tsv  # seconds, memory
    python scripts/scale.py memory CHECKPOINT     # peak memory against utterance length, train and decode

HW4P2 trained LAS on LibriSpeech train-clean-100: 28,539 utterances, 100.6 hours, 12.7 s on
average, up to about 25 s. `build` joins AN4 training utterances, each at a speed drawn from 0.9
to 1.1, with gaps of 0.2 to 0.8 s of the recording's own background between them and their
transcripts joined, into recordings whose lengths are drawn to match those figures: real speech
with HW4P2's size and lengths. It writes them as FLAC with a TSV manifest (`train.tsv`) and as
HW4P2-style features (`hw4/train/mfcc/<id>.npy`, log-mel as las computes them, and
`hw4/train/transcript/<id>.npy`, characters between <sos> and <eos>). The dev set is built the
same way from AN4 dev, whose speakers are not in train. Everything is drawn from one seed per
recording, so a build is the same on any machine and with any number of workers.

Lengths: train-clean-100's published summary (mean 12.69 s, at most 24.5 s, most recordings 11 to
17 s, a tail of short ones where a chapter's segmentation left them) is drawn as 85% a normal of
mean 14.0 s and deviation 2.3 s within 10-24.5 s, and 15% uniform over 1-10 s.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile
import torch
import typer
from harness import header
from tqdm import tqdm

from las.core.config import DataConfig, FeatureConfig, load_config
from las.data.augmentation.channel_effects import own_background
from las.data.dataset import BucketBatchSampler
from las.data.front_end.audio import load_audio
from las.data.front_end.features import FilterbankExtractor, change_speed

ROOT = Path(__file__).resolve().parent.parent
AN4 = ROOT / "data" / "an4"
OUT = ROOT / "runs" / "scale"
RATE = 16000
LONGEST = 24.5
HEADER = "id\tpath\tduration_s\ttext"

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def target_length(generator: torch.Generator) -> float:
    """Seconds, drawn to follow train-clean-100's lengths (see the module's docstring)."""
    short, normal, uniform = torch.rand(3, generator=generator, dtype=torch.float64).tolist()
    if short < 0.15:
        return 1.0 + 9.0 * uniform
    while True:
        length = 14.0 + 2.3 * float(torch.randn((), generator=generator, dtype=torch.float64))
        if 10.0 <= length <= LONGEST:
            return length


def joined(pool: list[tuple[torch.Tensor, str]], seed: int) -> tuple[torch.Tensor, str]:
    """One recording: utterances of `pool` (waveform, text) drawn at random, each at a speed from
    0.9 to 1.1, with 0.2-0.8 s of background between them, until the drawn length is reached;
    an utterance that would overshoot it by more than a second is passed over (ten tries)."""
    generator = torch.Generator().manual_seed(seed)
    target = round(target_length(generator) * RATE)
    pieces: list[torch.Tensor] = []
    texts: list[str] = []
    length = 0
    for _ in range(200):
        index = int(torch.randint(len(pool), (), generator=generator))
        speed = round(0.9 + 0.2 * float(torch.rand((), generator=generator)), 2)  # 0.01 steps: small kernels
        waveform, text = pool[index]
        expected = round(len(waveform) / speed)
        gap = round(RATE * (0.2 + 0.6 * float(torch.rand((), generator=generator)))) if pieces else 0
        if pieces and length + gap + expected > target + RATE:
            if length >= target - RATE:
                break
            continue
        if gap:
            pieces.append(own_background(pieces[-1], gap, RATE, generator))
        pieces.append(change_speed(waveform, speed, RATE))
        texts.append(text)
        length = sum(len(piece) for piece in pieces)
        if length >= target:
            break
    return torch.cat(pieces), " ".join(texts)


def read_pool(split: str) -> list[tuple[torch.Tensor, str]]:
    rows = [line.split("\t") for line in (AN4 / f"{split}.tsv").read_text().splitlines()[1:]]
    return [(load_audio(AN4 / audio, RATE), text) for _, audio, _, text in rows]


def write_recording(out: Path, split: str, identifier: str, waveform: torch.Tensor, text: str) -> str:
    """FLAC, HW4P2 features and transcript of one recording; its manifest row."""
    peak = float(waveform.abs().max())
    if peak > 0.999:
        waveform = waveform * (0.999 / peak)
    soundfile.write(out / split / "audio" / f"{identifier}.flac", waveform.numpy(), RATE, subtype="PCM_16")
    features = FilterbankExtractor(FeatureConfig())(waveform)  # (frames, mel_bins) as las computes them
    np.save(out / "hw4" / split / "mfcc" / f"{identifier}.npy", features.numpy().astype(np.float32))
    np.save(out / "hw4" / split / "transcript" / f"{identifier}.npy", np.array(["<sos>", *text, "<eos>"]))
    return f"{identifier}\t{split}/audio/{identifier}.flac\t{len(waveform) / RATE:.2f}\t{text}"


def build_part(job: tuple[Path, str, int, int, int]) -> list[str]:
    """Recordings `first` to `last` - 1 of a split (one worker's share)."""
    out, split, first, last, seed = job
    torch.set_num_threads(1)
    pool = read_pool("train" if split == "train" else "dev")
    rows = []
    for number in range(first, last):
        waveform, text = joined(pool, seed * 1_000_003 + number)
        rows.append(write_recording(out, split, f"{split}-{number:06d}", waveform, text))
    return rows


@app.command()
def build(
    out: Path = typer.Option(OUT, help="Where the corpus goes (git-ignored under runs/)."),
    train: int = typer.Option(28539, help="Training recordings (train-clean-100 has 28,539)."),
    dev: int = typer.Option(300, help="Dev recordings, from AN4 dev's speakers."),
    workers: int = typer.Option(os.cpu_count() or 1, help="Processes."),
    seed: int = 0,
) -> None:
    started = time.perf_counter()
    for split, count in (("train", train), ("dev", dev)):
        for folder in (out / split / "audio", out / "hw4" / split / "mfcc", out / "hw4" / split / "transcript"):
            folder.mkdir(parents=True, exist_ok=True)
        step = 200
        jobs = [(out, split, first, min(first + step, count), seed) for first in range(0, count, step)]
        with multiprocessing.get_context("spawn").Pool(workers) as processes:
            rows = [row for part in processes.imap(build_part, jobs) for row in part]
        (out / f"{split}.tsv").write_text("\n".join([HEADER, *rows]) + "\n")
        lengths = [float(row.split("\t")[2]) for row in rows]
        print(
            f"{split}: {len(rows)} recordings, {sum(lengths) / 3600:.1f} h, mean {statistics.mean(lengths):.2f} s, "
            f"median {statistics.median(lengths):.2f} s, {min(lengths):.2f}-{max(lengths):.2f} s"
        )
    print(f"built in {time.perf_counter() - started:.0f} s with {workers} processes")


@app.command()
def histogram(manifest: Path = typer.Argument(OUT / "train.tsv")) -> None:
    """Recordings per 2-second band of length, as a Markdown table."""
    lengths = [float(line.split("\t")[2]) for line in manifest.read_text().splitlines()[1:]]
    print(header("seconds", "recordings", "share"))
    for low in range(0, 26, 2):
        count = sum(low <= length < low + 2 for length in lengths)
        print(f"| {low}-{low + 2} | {count} | {100 * count / len(lengths):.1f}% |")


@app.command()
def padding(
    manifest: Path = typer.Argument(OUT / "train.tsv"),
    budgets: list[int] = typer.Option([8000, 16000, 32000], "--budget", help="data.batch_frames to try."),
) -> None:
    """The share of padded input frames in an epoch's batches of `manifest` (100 frames per second
    of its duration_s), batched as training batches them: by count (data.batch_size within
    data.max_batch_frames, the defaults) and by frames at each budget (data.batch_frames)."""
    lengths = [round(100 * float(line.split("\t")[2])) for line in manifest.read_text().splitlines()[1:]]
    default = DataConfig()
    ways = {f"by count: {default.batch_size} within {default.max_batch_frames} frames": default}
    ways |= {f"by frames: data.batch_frames={budget}": DataConfig(batch_frames=budget) for budget in budgets}
    print(header("batching", "batches", "utterances per batch, median", "padded frames per batch, median", "padding"))
    for name, data in ways.items():
        batches = BucketBatchSampler.for_training(lengths, data, seed=1).batches()
        padded = [max(lengths[index] for index in batch) * len(batch) for batch in batches]
        share = 1 - sum(lengths) / sum(padded)
        sizes = statistics.median(len(batch) for batch in batches)
        print(f"| {name} | {len(batches)} | {sizes:g} | {statistics.median(padded):.0f} | {100 * share:.1f}% |")


FIRST_STEP = """
import sys, time
import las.training.train

class FirstStep(Exception):
    pass

def step(self, *arguments, **settings):
    raise FirstStep

las.training.train.Trainer.step = step
from las.core.config import load_config
try:
    las.training.train.train(load_config(None, sys.argv[1:]))
except FirstStep:
    pass
"""


@app.command()
def startup(
    manifests: list[Path] = typer.Argument(..., help="Training manifests, e.g. runs/scale/rows-1000000.tsv."),
    dev: Path = typer.Option(AN4 / "dev.tsv"),
    setting: list[str] = typer.Option([], "--set", help="Training settings, e.g. data.cache_dir=/tmp/cold."),
) -> None:
    """Seconds from starting `las train` to its first training step, and the process's peak
    memory by then, for each manifest (a fresh process each, the feature cache as it is)."""
    print(header("training manifest", "rows", "seconds to the first step", "peak memory, MiB"))
    for manifest in manifests:
        with tempfile.TemporaryDirectory() as out:
            settings = [f"data.train={manifest}", f"data.dev={dev}", f"train.out={out}/run", "train.device=cpu"]
            settings += setting
            started = time.perf_counter()
            with open(f"{out}/stderr", "w+") as errors:
                child = subprocess.Popen([sys.executable, "-c", FIRST_STEP, *settings], stderr=errors)
                _, status, usage = os.wait4(child.pid, 0)  # this child's own peak memory
                seconds = time.perf_counter() - started
                if os.waitstatus_to_exitcode(status) != 0:
                    errors.seek(0)
                    raise SystemExit(f"{manifest}: las train failed:\n{errors.read()}")
        peak = usage.ru_maxrss / 1024
        count = f"{sum(1 for _ in open(manifest)) - 1:,}" if manifest.is_file() else "a folder"
        print(f"| {manifest} | {count} | {seconds:.1f} | {peak:.0f} |")


PEAK = """
import json, sys, torch

def resident() -> dict[str, int]:
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return {name: int(status[name].split()[0]) // 1024 for name in ("VmRSS", "VmHWM")}  # MiB

def reset_peak() -> int:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    with open("/proc/self/clear_refs", "w") as file:
        file.write("5")  # the kernel's peak resident size starts again from now
    return resident()["VmRSS"]

def report(before: int, **extra) -> None:
    cuda = torch.cuda.max_memory_allocated() // 2**20 if torch.cuda.is_available() else None
    print(json.dumps({"before": before, "peak": resident()["VmHWM"], "cuda": cuda, **extra}))
"""

TRAIN_STEPS = (
    PEAK
    + """
import las.training.train
original = las.training.train.Trainer.step
state = {"steps": 0}

class Done(Exception):
    pass

def step(self, *arguments, **settings):
    if state["steps"] == 0:
        state["before"] = reset_peak()
    result = original(self, *arguments, **settings)
    state["steps"] += 1
    if state["steps"] == 2:  # the second step: the optimiser's state exists from the first
        report(state["before"], rows=int(arguments[0].features.shape[0]))
        raise Done
    return result

las.training.train.Trainer.step = step
from las.core.config import load_config
try:
    las.training.train.train(load_config(sys.argv[1], sys.argv[2:]))
except Done:
    pass
"""
)

DECODE = (
    PEAK
    + """
import soundfile
from las.recognition.recognizer import Recognizer
checkpoint, audio, device, strategy = sys.argv[1:5]
recognizer = Recognizer.load(checkpoint, device, strategy=strategy, segment_seconds=30)
samples, rate = soundfile.read(audio, dtype="float32")
before = reset_peak()
result = recognizer.transcribe(samples, rate)
report(before, characters=len(result.text), segments=len(result.segments))
"""
)


def recording_of(seconds: float, manifest: Path, out: Path) -> tuple[Path, str]:
    """A FLAC of exactly `seconds` s: recordings of `manifest` joined end to end and cut there;
    the transcript cut at the same share of its characters (for batch sizes, not scoring)."""
    rows = [line.split("\t") for line in manifest.read_text().splitlines()[1:]]
    pieces, texts, length = [], [], 0
    for _, audio, _, text in rows:
        pieces.append(load_audio(manifest.parent / audio, RATE))
        texts.append(text)
        length += len(pieces[-1])
        if length >= seconds * RATE:
            break
    waveform = torch.cat(pieces)[: round(seconds * RATE)]
    text = " ".join(texts)
    text = text[: max(1, round(len(text) * len(waveform) / length))].strip()
    path = out / f"{seconds:g}s.flac"
    soundfile.write(path, waveform.numpy(), RATE, subtype="PCM_16")
    return path, text


def peak_of(code: str, arguments: list[str]) -> dict:
    finished = subprocess.run([sys.executable, "-c", code, *arguments], capture_output=True, text=True)
    if finished.returncode:
        raise SystemExit(f"failed: {finished.stderr.strip()[-3000:]}")
    return json.loads(finished.stdout.strip().splitlines()[-1])


@app.command()
def memory(
    checkpoint: Path = typer.Argument(..., help="A trained model to decode with."),
    recipe: Path = typer.Option(ROOT / "data" / "recipes" / "hw4p2.toml", help="The training recipe."),
    manifest: Path = typer.Option(OUT / "dev.tsv", help="Recordings to join into each length."),
    lengths: list[float] = typer.Option([5, 10, 15, 20, 25], "--seconds"),
    device: str = "cpu",
    strategies: list[str] = typer.Option(["greedy", "sample", "beam", "ctc"], "--strategy"),
) -> None:
    """Peak memory against utterance length, each in a fresh process: two training steps of
    `recipe` on a batch of utterances of that length (as many as its data.batch_frames holds),
    and each decoding strategy on one recording of that length, decoded whole. Memory is the
    process's peak resident size above what it held before the work (MiB; on a GPU, also the
    peak of CUDA memory allocated)."""
    print(
        "| seconds | training: rows | training: peak above start, MiB | "
        + " | ".join(f"{name}: peak above start, MiB" for name in strategies)
        + " |\n|"
        + " --- |" * (3 + len(strategies))
    )
    budget = load_config(recipe).data.batch_frames
    if not budget:
        raise SystemExit(f"{recipe}: sets no data.batch_frames, which this measures batches by")
    with tempfile.TemporaryDirectory() as folder:
        for seconds in lengths:
            audio, text = recording_of(seconds, manifest, Path(folder))
            train = Path(folder) / f"{seconds:g}s.tsv"
            rows = max(1, budget // (1 + round(seconds * 100)))  # one batch: frames of 10 ms, and one more
            lines = "".join(f"u{number}\t{audio.name}\t{seconds}\t{text}\n" for number in range(rows))
            train.write_text(f"{HEADER}\n{lines}")
            settings = [
                f"data.train={train}",
                f"data.dev={train}",
                f"train.out={folder}/run-{seconds:g}",
                f"train.device={device}",
                "data.workers=0",
                "train.speed_perturbation=0",
                "train.tensorboard=false",
            ]
            trained = peak_of(TRAIN_STEPS, [str(recipe), *settings])
            cells = [f"{seconds:g}", str(trained["rows"]), describe_peak(trained)]
            for strategy in strategies:
                cells.append(describe_peak(peak_of(DECODE, [str(checkpoint), str(audio), device, strategy])))
            print("| " + " | ".join(cells) + " |", flush=True)


def describe_peak(measured: dict) -> str:
    text = f"{measured['peak'] - measured['before']}"
    if measured.get("characters") is not None:
        text += f" ({measured['characters']} characters)"
    return text + (f", CUDA {measured['cuda']}" if measured["cuda"] is not None else "")


@app.command()
def rows(
    count: int = typer.Option(1_000_000, "--rows", help="Rows of the manifest."),
    out: Path = typer.Option(OUT, help="Where the manifest and its files go."),
    distinct: float = typer.Option(
        0.0, help="> 0: each row a file of its own, this many seconds of an AN4 recording (not a link)."
    ),
) -> None:
    """A manifest of `count` rows for measuring start-up at a corpus of that many utterances: each a
    symbolic link to an AN4 training recording (cycled), or with `--distinct` a recording of its
    own (cut from one, from 0.4 s in plus one sample per cycle, so that no two are the same), as
    a cold cache meets a corpus of a million files."""
    source = [line.split("\t") for line in (AN4 / "train.tsv").read_text().splitlines()[1:]]
    folder = out / (f"rows-{count}" if not distinct else f"rows-{count}-distinct")
    folder.mkdir(parents=True, exist_ok=True)
    lines = [HEADER]
    for number in range(count):
        identifier, audio, duration, text = source[number % len(source)]
        if distinct:
            duration = f"{distinct:g}"
        lines.append(f"row{number:07d}-{identifier}\t{folder.name}/{number:07d}.flac\t{duration}\t{text}")
    if distinct:
        jobs = [(folder, source, distinct, start, min(start + 10_000, count)) for start in range(0, count, 10_000)]
        with multiprocessing.get_context("fork").Pool(2) as pool:
            for _ in tqdm(pool.imap_unordered(write_excerpts, jobs), total=len(jobs), desc="files (10,000 each)"):
                pass
    else:
        for number in range(count):
            link = folder / f"{number:07d}.flac"
            if not link.is_symlink():
                link.symlink_to((AN4 / source[number % len(source)][1]).resolve())
    manifest = out / f"{folder.name}.tsv"
    manifest.write_text("\n".join(lines) + "\n")
    print(f"{manifest}: {count} rows")


def write_excerpts(job: tuple[Path, list[list[str]], float, int, int]) -> None:
    folder, source, seconds, start, end = job
    recordings: dict[str, tuple[np.ndarray, int]] = {}
    for number in range(start, end):
        audio = source[number % len(source)][1]
        if audio not in recordings:
            recordings[audio] = soundfile.read(AN4 / audio, dtype="int16")
        samples, rate = recordings[audio]
        first = round(0.4 * rate) + number // len(source)
        soundfile.write(folder / f"{number:07d}.flac", samples[first : first + round(seconds * rate)], rate)


if __name__ == "__main__":
    app()
