"""Train recipe variants on AN4 under one seed and one schedule, stop each after the same number
of epochs (Ctrl-C, which saves and exits), and print a Markdown table of their dev CER.

    python scripts/ablation.py --stop-after 25

Every variant keeps the default schedule (its `--epochs`), so the learning-rate and
teacher-forcing curves agree up to the stopping epoch; only the named settings differ.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import typer

VARIANTS: dict[str, list[str]] = {
    "default (location attention, CTC 0.5)": [],
    "location, CTC 0.3": ["model.ctc_weight=0.3"],
    "location, no CTC": ["model.ctc_weight=0"],
    "dot attention, CTC 0.5": ["model.attention=dot"],
}

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def records(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def train_until(run: Path, assignments: list[str], stop_after: int) -> list[dict]:
    command = [sys.executable, "-m", "las", "train", "--out", str(run)]
    command += [item for assignment in assignments for item in ("--set", assignment)]
    # SIGINT back to its default in the child: a shell starts background jobs with it ignored,
    # and the Ctrl-C that stops training would then never arrive.
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    while process.poll() is None and len(records(run)) < stop_after:
        time.sleep(2)
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        process.wait()
    return records(run)[:stop_after]


@app.command()
def main(stop_after: int = 25, root: Path = Path("runs/ablation")) -> None:
    rows = []
    for name, assignments in VARIANTS.items():
        run = root / name.split(" (")[0].replace(" ", "-").replace(",", "").replace(".", "")
        history = records(run) if len(records(run)) >= stop_after else train_until(run, assignments, stop_after)
        history = history[:stop_after]
        best = min(record["dev_cer"] for record in history)
        seconds = sorted(record["seconds"] for record in history)[len(history) // 2]
        cer_at = {epoch: history[epoch - 1]["dev_cer"] for epoch in (10, 15, 20, stop_after) if epoch <= len(history)}
        rows.append((name, cer_at, best, seconds))
    epochs = sorted({epoch for _, cer_at, _, _ in rows for epoch in cer_at})
    print("| variant | " + " | ".join(f"dev CER @{epoch}" for epoch in epochs) + " | best | s/epoch |")
    print("| --- " * (len(epochs) + 3) + "|")
    for name, cer_at, best, seconds in rows:
        cells = " | ".join(f"{cer_at[epoch]:.1f}" for epoch in epochs)
        print(f"| {name} | {cells} | {best:.1f} | {seconds:.1f} |")


if __name__ == "__main__":
    app()
