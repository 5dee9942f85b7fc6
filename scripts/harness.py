"""What the measurement programs share: manifests read and written, figures over seeds, Markdown
tables printed as they are measured, and seeds trained side by side.

    from harness import header, row, spread
    print(header("setting", "CER %"))
    print(row("beam 8", spread([7.1, 7.4, 6.9])))      # | beam 8 | 7.13 (6.90-7.40) |
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def read_manifest(path: Path) -> tuple[list[str], list[list[str]]]:
    """A TSV manifest's header and rows (id, path, duration, text: las's own columns), split at
    tabs as las splits them."""
    lines = path.read_text().splitlines()
    return lines[0].split("\t"), [line.split("\t") for line in lines[1:]]


def write_manifest(path: Path, header: Sequence[str], rows: Sequence[Sequence[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join(line) + "\n" for line in [header, *rows]))
    return path


def spread(values: Sequence[float], digits: int = 2) -> str:
    """Figures over seeds as `mean (min-max)`."""
    return f"{statistics.mean(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def header(*columns: str) -> str:
    """A Markdown table's first two lines."""
    return f"| {' | '.join(columns)} |\n|{' --- |' * len(columns)}"


def row(*cells: object) -> str:
    return f"| {' | '.join(str(cell) for cell in cells)} |"


def train_seeds(out: Path, seeds: Sequence[int], arguments: Sequence[str], threads: int = 1) -> list[Path]:
    """`las train ARGUMENTS --seed N --out OUT/seed-N` for every seed at once (`threads` each), as
    the seeds of an accuracy claim are trained; their run folders, once every one has ended well."""
    runs = [out / f"seed-{seed}" for seed in seeds]
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "las", "--threads", str(threads), "train", *arguments]
    processes = [
        subprocess.Popen([*command, "--seed", str(seed), "--out", str(run)], env=environment)
        for seed, run in zip(seeds, runs, strict=True)
    ]
    failed = [str(run) for process, run in zip(processes, runs, strict=True) if process.wait() != 0]
    if failed:
        raise SystemExit(f"training failed in {', '.join(failed)}")
    return runs
