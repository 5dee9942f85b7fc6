"""ONNX Runtime against PyTorch on the same checkpoints (docs/archive/experiments.md, "Export").

    python scripts/export_benchmark.py runs/an4/averaged.pt runs/an4-2/averaged.pt runs/an4-3/averaged.pt

Each checkpoint is exported (fp32 and `--quantize int8`, under runs/export-benchmark/) and AN4 dev
decoded with the default decoding by PyTorch and by both exports: how many hypotheses are the
same as PyTorch's, the largest score difference, and the CER of each. Then, for the first
checkpoint, `las decode` of AN4 dev as a user runs it, one process per measurement, 1 and 2
threads, the variants interleaved in `--rounds` paired rounds: the process's seconds from start to
exit, the decoding's own seconds (features come from the cache), its peak memory, and apart
the seconds from the model's path to a recogniser ready to decode; medians.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import typer
from harness import header

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "data" / "an4" / "dev.tsv"
OUT = ROOT / "runs" / "export-benchmark"
# A cache of AN4 dev's features alone: the user's own cache, however large, is not what is timed.
CACHE = ["--set", f"data.cache_dir={OUT / 'cache'}"]

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def las(*arguments: object, threads: int = 2) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "las", "--threads", str(threads), *map(str, arguments)]
    return subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)


def exports(checkpoint: Path, name: str) -> dict[str, Path]:
    """The checkpoint and its fp32 and int8 exports, written once."""
    models = {"pytorch": checkpoint}
    for kind, options in (("onnx fp32", []), ("onnx int8", ["--quantize", "int8"])):
        folder = OUT / name / kind.split()[1]
        if not (folder / "model.json").is_file():
            las("export", checkpoint, folder, *options)
        models[kind] = folder
    return models


def decoded(model: Path, out: Path) -> list[dict]:
    las("decode", model, DEV, "--format", "jsonl", "--out", out, *CACHE)
    return [json.loads(line) for line in out.read_text().splitlines()]


def cer(hypotheses: Path) -> float:
    return json.loads(las("eval", hypotheses, DEV, "--json").stdout)["cer"]


def size_mb(path: Path) -> float:
    files = [path] if path.is_file() else list(path.glob("*.onnx"))
    return sum(item.stat().st_size for item in files) / 1e6


# `las` in a process that reports its own peak memory as it exits (RUSAGE_CHILDREN would give
# the largest of every child so far).
MEASURED = """
import resource, runpy, sys
sys.argv = ["las", *sys.argv[1:]]
try:
    runpy.run_module("las", run_name="__main__")
finally:
    print(f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", file=sys.stderr)
"""


LOADED = """
import sys, time
import torch
from las.recognition.recognizer import Recognizer
torch.set_num_threads(int(sys.argv[2]))
started = time.perf_counter()
Recognizer.load(sys.argv[1], device="cpu")
print(time.perf_counter() - started)
"""


def load_seconds(model: Path, threads: int) -> float:
    """Seconds from a model's path to a recogniser ready to decode, libraries already imported."""
    command = [sys.executable, "-c", LOADED, str(model), str(threads)]
    return float(subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout)


def timed(model: Path, threads: int) -> dict[str, float]:
    """One `las decode` process: its seconds, its decoding's seconds, its peak memory (MB)."""
    command = [sys.executable, "-c", MEASURED, "--threads", str(threads), "decode", str(model), str(DEV), *CACHE]
    started = time.perf_counter()
    result = subprocess.run([*command, "--out", str(OUT / "timed.csv")], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(result.stderr)
    seconds = float(re.search(r"decoded \d+ recordings in ([\d.]+)s", result.stderr).group(1))
    peak = int(re.search(r"peak (\d+)", result.stderr).group(1)) / 1024
    return {"wall": wall, "decoding": seconds, "peak": peak, "load": load_seconds(model, threads)}


@app.command()
def main(checkpoints: list[Path], rounds: int = 3) -> None:
    agreement: dict[str, list[tuple[int, float, float]]] = {}
    sizes: dict[str, float] = {}
    for index, checkpoint in enumerate(checkpoints):
        models = exports(checkpoint, f"seed{index + 1}")
        outputs = {kind: OUT / f"seed{index + 1}-{kind.replace(' ', '-')}.jsonl" for kind in models}
        results = {kind: decoded(model, outputs[kind]) for kind, model in models.items()}
        reference = results["pytorch"]
        for kind, found in results.items():
            same = sum(a["text"] == b["text"] for a, b in zip(reference, found, strict=True))
            worst = max(abs(a["score"] - b["score"]) for a, b in zip(reference, found, strict=True))
            rate = cer(outputs[kind])
            agreement.setdefault(kind, []).append((same, worst, rate))
            sizes[kind] = size_mb(models[kind])
    print(f"AN4 dev, default decoding, {len(checkpoints)} checkpoint(s): mean (min-max) over them\n")
    print(header("model", "files, MB", "hypotheses as PyTorch's", "largest score difference", "CER %"))
    for kind, rows in agreement.items():
        same = [row[0] for row in rows]
        rates = [row[2] for row in rows]
        print(
            f"| {kind} | {sizes[kind]:.1f} | {min(same)}-{max(same)} / 100 | {max(row[1] for row in rows):.4f} "
            f"| {statistics.mean(rates):.2f} ({min(rates):.2f}-{max(rates):.2f}) |"
        )
    models = exports(checkpoints[0], "seed1")
    times: dict[tuple[str, int], list[dict[str, float]]] = {}
    for _ in range(rounds):
        for threads in (1, 2):
            for kind, model in models.items():
                times.setdefault((kind, threads), []).append(timed(model, threads))
    print(f"\n`las decode` of AN4 dev (100 utterances), default decoding; medians of {rounds} paired rounds\n")
    print(
        header(
            "model", "threads", "process, s", "model load, s", "decoding, s", "decoding x PyTorch", "peak memory, MB"
        )
    )
    for (kind, threads), measured in times.items():
        wall = statistics.median(item["wall"] for item in measured)
        seconds = statistics.median(item["decoding"] for item in measured)
        base = statistics.median(item["decoding"] for item in times[("pytorch", threads)])
        peak = statistics.median(item["peak"] for item in measured)
        load = statistics.median(item["load"] for item in measured)
        print(f"| {kind} | {threads} | {wall:.2f} | {load:.2f} | {seconds:.2f} | {seconds / base:.2f} | {peak:.0f} |")


if __name__ == "__main__":
    app()
