"""las's data path against Lhotse's, for issue 27's question: would Lhotse serve las better?

    pip install -e '.[benchmark]'                            # Lhotse: not a dependency of las
    python scripts/lhotse_comparison.py padding runs/scale/train.tsv
    python scripts/lhotse_comparison.py startup runs/scale/rows-1000000.tsv

`padding`: one epoch's batches of a manifest (its `duration_s`, 100 frames a second) from las's
training sampler by frames (`data.batch_frames`: the longest row x rows within the budget) and
from Lhotse's `DynamicBucketingSampler` (rows x the longest within `max_duration`: the same budget
in seconds; Lhotse's buckets are duration quantiles, las sorts the epoch by jittered length),
shuffled, as training uses them: the share of padding, and the largest batch in padded
frames, which is what a step's memory has to fit.

`startup`: a fresh process each, one thread: the manifest to the first batch of an epoch, peak
memory by then, a whole epoch's batches, and a resume in the middle of an epoch. las reads its
TSV into columns (each file checked to exist) and composes the epoch's length-sorted batches;
Lhotse reads its own manifest (written once from the TSV, durations as given: no audio is read)
lazily and fills its buckets' buffer. Lhotse's eager `CutSet` (the whole manifest in memory) is
measured too.
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import typer

from las.core.config import DataConfig
from las.data.dataset import BucketBatchSampler

ROOT = Path(__file__).resolve().parent.parent
SEED = 1

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def require_lhotse() -> None:
    try:
        import lhotse  # noqa: F401
    except ImportError:
        raise SystemExit("this comparison needs Lhotse: pip install -e '.[benchmark]'") from None


def manifest_rows(manifest: Path) -> list[tuple[str, str, float]]:
    """(id, audio path as written, seconds) of each row of a las TSV manifest."""
    rows = []
    for line in manifest.read_text().splitlines()[1:]:
        identifier, audio, duration, _ = line.split("\t", 3)
        rows.append((identifier, audio, float(duration)))
    return rows


def lhotse_cuts(rows: list[tuple[str, str, float]], base: Path):
    """One Lhotse cut per row (a 16 kHz recording of the row's duration; no audio is read)."""
    from lhotse import AudioSource, MonoCut, Recording

    for identifier, audio, seconds in rows:
        path = audio if os.path.isabs(audio) else str(base / audio)
        recording = Recording(identifier, [AudioSource("file", [0], path)], 16000, round(16000 * seconds), seconds)
        yield MonoCut(identifier, 0.0, seconds, 0, recording=recording)


def table_header(columns: list[str]) -> str:
    return f"| {' | '.join(columns)} |\n|{' --- |' * len(columns)}"


def summary(batches: list[list[float]], frames_per_second: int = 100) -> dict[str, float]:
    """Batches given as their rows' seconds."""
    lengths = [[round(frames_per_second * seconds) for seconds in batch] for batch in batches]
    padded = [max(batch) * len(batch) for batch in lengths]
    return {
        "batches": len(batches),
        "rows": statistics.median(len(batch) for batch in batches),
        "padded": statistics.median(padded),
        "largest": max(padded),
        "padding": 100 * (1 - sum(map(sum, lengths)) / sum(padded)),
    }


@app.command()
def padding(
    manifest: Path = typer.Argument(ROOT / "runs" / "scale" / "train.tsv"),
    budgets: list[int] = typer.Option([8000, 16000, 32000], "--budget", help="Padded frames per batch."),
    buckets: list[int] = typer.Option([10, 30], "--buckets", help="Lhotse's num_buckets (its default: 10)."),
) -> None:
    require_lhotse()
    from lhotse import CutSet
    from lhotse.dataset import DynamicBucketingSampler

    rows = manifest_rows(manifest)
    seconds = [duration for _, _, duration in rows]
    cuts = CutSet.from_cuts(lhotse_cuts(rows, manifest.parent))
    columns = ["budget, frames", "sampler", "batches", "rows per batch, median", "padded frames, median"]
    print(table_header([*columns, "largest batch", "padding"]))
    for budget in budgets:
        lengths = [round(100 * duration) for duration in seconds]
        ours = BucketBatchSampler.for_training(lengths, DataConfig(batch_frames=budget), seed=SEED).batches()
        ways = {"las, `data.batch_frames`": [[seconds[index] for index in batch] for batch in ours]}
        for count in buckets:
            sampler = DynamicBucketingSampler(
                cuts, max_duration=budget / 100, num_buckets=count, shuffle=True, seed=SEED, buffer_size=len(rows)
            )
            ways[f"Lhotse, {count} buckets"] = [[cut.duration for cut in batch] for batch in sampler]
        for name, batches in ways.items():
            measured = summary(batches)
            print(
                f"| {budget} | {name} | {measured['batches']} | {measured['rows']:g} | {measured['padded']:.0f} "
                f"| {measured['largest']} | {measured['padding']:.1f}% |"
            )


# The process's peak resident memory so far (MiB). Not wait4's figure: a child's counts the
# parent's resident size at the fork.
PEAK = """
def PEAK() -> int:
    return int(next(line for line in open("/proc/self/status") if line.startswith("VmHWM")).split()[1]) // 1024
"""

LAS_STARTUP = (
    PEAK
    + """
import array, json, sys, time
started = time.perf_counter()
import torch
torch.set_num_threads(1)
from las.core.config import DataConfig
from las.data.dataset import BucketBatchSampler
from las.data.corpora.manifest import read_utterances
utterances = read_utterances(sys.argv[1])
with open(sys.argv[1]) as file:  # the rows' lengths streamed into one array, as training's planned lengths are
    next(file)
    lengths = array.array("i", (round(100 * float(line.split("\\t", 3)[2])) for line in file))
sampler = BucketBatchSampler.for_training(lengths, DataConfig(batch_frames=int(sys.argv[2])), seed=1)
first = next(iter(sampler))
to_first = time.perf_counter() - started
peak = PEAK()
batches = len(sampler.batches())
sampler.set_epoch(1)
started = time.perf_counter()
epoch = sum(1 for _ in sampler)
whole = time.perf_counter() - started
started = time.perf_counter()  # resume in the middle of epoch 1: the same composition, read from a batch
again = BucketBatchSampler.for_training(lengths, DataConfig(batch_frames=int(sys.argv[2])), seed=1)
again.set_epoch(1)
middle = again.batches()[epoch // 2]
resume = time.perf_counter() - started
assert middle == sampler.batches()[epoch // 2]
print(json.dumps({"first": to_first, "peak": peak, "epoch": whole, "resume": resume, "batches": epoch}))
"""
)

LHOTSE_STARTUP = (
    PEAK
    + """
import json, sys, time, warnings
warnings.simplefilter("ignore")
started = time.perf_counter()
import torch
torch.set_num_threads(1)
from lhotse import CutSet
from lhotse.dataset import DynamicBucketingSampler
path, budget, lazy = sys.argv[1], float(sys.argv[2]) / 100, sys.argv[3] == "lazy"
cuts = CutSet.from_jsonl_lazy(path) if lazy else CutSet.from_jsonl(path)
def sampler():
    made = DynamicBucketingSampler(cuts, max_duration=budget, shuffle=True, seed=1)
    made.set_epoch(1)
    return made
epoch_sampler = sampler()
iterator = iter(epoch_sampler)
first = next(iterator)
to_first = time.perf_counter() - started
peak = PEAK()
started = time.perf_counter()
batches = 1 + sum(1 for _ in iterator)
whole = time.perf_counter() - started
middle = sampler()  # resume in the middle of the epoch: Lhotse replays it up to there
iterator = iter(middle)
for _ in range(batches // 2):
    next(iterator)
state = middle.state_dict()
expected = [cut.id for cut in next(iterator)]
started = time.perf_counter()
restored = sampler()
restored.load_state_dict(state)
resumed = [cut.id for cut in next(iter(restored))]
resume = time.perf_counter() - started
assert resumed == expected
print(json.dumps({"first": to_first, "peak": peak, "epoch": whole, "resume": resume, "batches": batches}))
"""
)


def measured(code: str, arguments: list[str]) -> dict[str, float]:
    """What `code` prints (JSON), in a fresh process with one thread."""
    environment = os.environ | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code, *arguments], stdout=subprocess.PIPE, env=environment)
    if done.returncode != 0:
        raise SystemExit(f"measurement failed: {arguments}")
    return json.loads(done.stdout)


@app.command()
def startup(
    manifest: Path = typer.Argument(ROOT / "runs" / "scale" / "rows-1000000.tsv"),
    budget: int = typer.Option(8000, help="Padded frames per batch (Lhotse: a 100th as seconds)."),
    rounds: int = typer.Option(2, help="Paired rounds."),
) -> None:
    require_lhotse()
    from lhotse import CutSet

    lhotse_manifest = manifest.with_suffix(".cuts.jsonl.gz")
    if not lhotse_manifest.exists():
        started = time.perf_counter()
        with CutSet.open_writer(lhotse_manifest) as writer:
            for cut in lhotse_cuts(manifest_rows(manifest), manifest.parent):
                writer.write(cut)
        print(f"{lhotse_manifest}: written in {time.perf_counter() - started:.0f} s")
    with gzip.open(lhotse_manifest, "rt") as cuts, open(manifest) as rows:
        rows.readline()  # the header
        print(f"a Lhotse cut as JSON: {len(cuts.readline())} characters (a las TSV row: {len(rows.readline())})")
    columns = ["round", "data path", "seconds to the first batch", "peak MiB by then"]
    print(table_header([*columns, "the rest of an epoch's batches, s", "resume mid-epoch, s", "batches"]))
    for round in range(1, rounds + 1):
        ways = {
            "las: TSV into columns, sorted epoch": (LAS_STARTUP, [str(manifest), str(budget)]),
            "Lhotse: lazy manifest, dynamic buckets": (LHOTSE_STARTUP, [str(lhotse_manifest), str(budget), "lazy"]),
            "Lhotse: eager manifest, dynamic buckets": (LHOTSE_STARTUP, [str(lhotse_manifest), str(budget), "eager"]),
        }
        for name, (code, arguments) in ways.items():
            result = measured(code, arguments)
            print(
                f"| {round} | {name} | {result['first']:.1f} | {result['peak']:.0f} | {result['epoch']:.1f} "
                f"| {result['resume']:.2f} | {result['batches']} |"
            )


if __name__ == "__main__":
    app()
