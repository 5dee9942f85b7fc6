"""Interrupt training with SIGKILL, SIGINT and SIGTERM at random moments, resume every time, and
compare the final weights and metrics with those of an uninterrupted run: they must be identical.

    python scripts/faults.py resume --trials 3 --interrupts 3
    python scripts/faults.py resume --ranks 2 --out runs/faults-ranks
    python scripts/faults.py lstm-signals --runs 30
    python scripts/faults.py rank-exits --runs 50 --load 2

A small model trains on AN4 utterances (the tests' tiny configuration, a few epochs) with a
mid-epoch checkpoint every few seconds, so that SIGKILL lands between saves as well as on them.
Every run uses one thread (OMP_NUM_THREADS=1 and torch's own setting), so that the arithmetic is
the same in every process. Each trial starts a run, sends the signal at a random moment
(uniform over the expected length of a run), resumes from `last.pt` (or starts again when the
run was killed before its first save), and repeats `--interrupts` times before letting it finish.
Prints a Markdown table; exits non-zero if any trial differs from the reference.

With `--ranks 2` every run is `torchrun --nproc-per-node=2` (gloo), the reference too. torchrun
starts its workers in sessions of their own, so the signals go as a scheduler sends them: SIGKILL
to every process of the job at once (a node lost, the OOM killer on the job), SIGINT and SIGTERM
to the launcher, which passes them on to its workers (Ctrl-C, `scancel`, Kubernetes).

`rank-exits` trains to the end with two processes again and again, beside `--load` busy processes
(a loaded machine makes one rank finish well after the other), and counts the runs that do not
exit 0: a rank once aborted at exit (`terminate called without an active exception`) after its
epochs were done.

`lstm-signals` shows why training blocks SIGINT/SIGTERM on its main thread (las/core/stopping.py):
a process trains a BLSTM on the CPU with a Python SIGINT handler, receives SIGINT at a random
moment mid-training, and either finishes or crashes; counted per variant.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
import typer
from harness import header, read_manifest, row, write_manifest

ROOT = Path(__file__).resolve().parent.parent
AN4 = ROOT / "data" / "an4"
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}
SETTINGS = [
    "model.listener_hidden=48",
    "model.key_dim=48",
    "model.value_dim=48",
    "model.embedding_dim=32",
    "model.speller_hidden=96",
    "model.ctc_weight=0.3",
    "model.location_channels=4",
    "model.location_kernel=5",
    "model.dropout=0.2",  # draws from the random state in every batch
    "train.teacher_forcing_final=0.7",  # so does sampled teacher forcing
    "train.teacher_forcing_decay_epochs=2",
    "train.specaugment_start_epoch=1",  # and SpecAugment
    "train.warmup_steps=5",
    "train.learning_rate=3e-3",
    "train.average_best=2",
    "train.device=cpu",
    "data.batch_size=4",
    "data.workers=0",
]

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def write_manifests(directory: Path, train_count: int, dev_count: int) -> tuple[Path, Path]:
    columns, rows = read_manifest(AN4 / "train.tsv")
    rows = [[identifier, str(AN4 / audio), duration, text] for identifier, audio, duration, text in rows]
    train = write_manifest(directory / "train.tsv", columns, rows[:train_count])
    return train, write_manifest(directory / "dev.tsv", columns, rows[train_count : train_count + dev_count])


def command(out: Path, settings: list[str], resume: bool, ranks: int) -> list[str]:
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"] if ranks > 1 else []
    arguments = [sys.executable, *launcher, "-m", "las", "train", "--out", str(out)]
    arguments += [item for setting in settings for item in ("--set", setting)]
    return arguments + (["--resume"] if resume and (out / "last.pt").exists() else [])


def environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run_to_end(out: Path, settings: list[str], ranks: int) -> float:
    """Train (or resume) until the run finishes; its wall-clock seconds."""
    started = time.perf_counter()
    arguments = command(out, settings, True, ranks)
    result = subprocess.run(arguments, env=environment(), capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"training failed in {out}:\n{result.stderr}")
    return time.perf_counter() - started


def descendants(parent: int) -> list[int]:
    """Every process below `parent` (children, theirs, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, waiting = [], [parent]
    while waiting:
        below = children.get(waiting.pop(), [])
        found += below
        waiting += below
    return found


def kill_all(process: subprocess.Popen) -> None:
    """SIGKILL to `process` and every process below it at once, as a lost node ends a job."""
    for pid in [process.pid, *descendants(process.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def interrupt(out: Path, settings: list[str], signal_number: int, after: float, ranks: int) -> str:
    """Start (or resume) training and send `signal_number` after `after` seconds; what happened."""
    process = subprocess.Popen(
        command(out, settings, True, ranks),
        env=environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        process.wait(timeout=after)
        return "finished first"
    except subprocess.TimeoutExpired:
        if signal_number == signal.SIGKILL:
            kill_all(process)
        else:
            process.send_signal(signal_number)
    _, stderr = process.communicate()
    if process.returncode == 0:
        return "finished first"  # the signal came as the run ended
    if signal_number == signal.SIGKILL:
        return "killed"
    if "stopped by" in stderr:
        return "saved and stopped"
    # During start-up or feature loading there is nothing to save: the process ends by the signal,
    # or torchrun, having passed it on to its workers, reports it.
    launcher_stopped = f"got signal: {signal_number}" in stderr
    if process.returncode in (130, -signal_number) or launcher_stopped:
        return "stopped before training began"
    name = signal.Signals(signal_number).name
    raise RuntimeError(f"unexpected end after {name} in {out} (exit code {process.returncode}): {stderr.strip()}")


def outcome(out: Path) -> tuple[dict[str, torch.Tensor], list[tuple[float, float]]]:
    """The final weights, and (train loss, dev CER) of every epoch."""
    weights = torch.load(out / "last.pt", weights_only=True)["model"]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return weights, [(record["train_loss"], record["dev_cer"]) for record in metrics]


def identical(reference: dict[str, torch.Tensor], weights: dict[str, torch.Tensor]) -> bool:
    return reference.keys() == weights.keys() and all(torch.equal(reference[name], weights[name]) for name in reference)


@app.command()
def resume(
    out: Path = typer.Option(ROOT / "runs" / "faults", help="Where the runs go (emptied first)."),
    trials: int = typer.Option(3, help="Runs interrupted per signal."),
    interrupts: int = typer.Option(3, help="Interruptions per run before it may finish."),
    epochs: int = typer.Option(4, help="Epochs per run."),
    train_count: int = typer.Option(32, help="Training utterances."),
    checkpoint_seconds: float = typer.Option(2.0, help="Mid-epoch checkpoint interval."),
    seed: int = typer.Option(0, help="Seeds the interruption moments."),
    ranks: int = typer.Option(1, help="Processes per run (torchrun, gloo) when more than one."),
) -> None:
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    train, dev = write_manifests(out, train_count, 8)
    settings = SETTINGS + [
        f"data.train={train}",
        f"data.dev={dev}",
        f"data.cache_dir={out / 'cache'}",
        f"train.epochs={epochs}",
        f"train.checkpoint_minutes={checkpoint_seconds / 60}",
    ]
    run_to_end(out / "warm-cache", settings, ranks)  # features cached once, so every run starts alike
    duration = run_to_end(out / "reference", settings, ranks)
    reference_weights, reference_metrics = outcome(out / "reference")
    print(
        f"reference run: {ranks} process(es), {duration:.1f}s, {epochs} epochs, "
        f"final dev CER {reference_metrics[-1][1]:.2f}%"
    )
    generator = random.Random(seed)
    rows, failures = [], 0
    for name, number in SIGNALS.items():
        counts: dict[str, int] = {}
        same_weights = same_metrics = 0
        for trial in range(trials):
            run = out / f"{name.lower()}-{trial}"
            for _ in range(interrupts):
                what = interrupt(run, settings, number, generator.uniform(0.5, duration), ranks)
                counts[what] = counts.get(what, 0) + 1
            run_to_end(run, settings, ranks)
            weights, metrics = outcome(run)
            same_weights += identical(reference_weights, weights)
            same_metrics += metrics == reference_metrics
        failures += (trials - same_weights) + (trials - same_metrics)
        happened = ", ".join(f"{count} {what}" for what, count in sorted(counts.items()))
        rows.append(f"| {name} | {trials} | {happened} | {same_weights}/{trials} | {same_metrics}/{trials} |")
    print("\n| signal | runs | interruptions | final weights identical | metrics identical |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    raise typer.Exit(1 if failures else 0)


LSTM_PROCESS = """
import signal, sys, time, torch
signal.signal(signal.SIGINT, lambda number, frame: None)
variant = sys.argv[1]
if variant == "oneDNN off":
    torch.backends.mkldnn.enabled = False
lstm = torch.nn.LSTM(80, 160, bidirectional=True, batch_first=True)
x = torch.randn(16, 300, 80)
lstm(x)[0].sum().backward()  # OpenMP threads start here, with SIGINT unblocked
if variant == "main thread blocked (las)":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
print("training", flush=True)
started = time.monotonic()
while time.monotonic() - started < 3:
    lstm(x)[0].sum().backward()
"""
LSTM_VARIANTS = ["handler only", "oneDNN off", "main thread blocked (las)"]


@app.command()
def lstm_signals(runs: int = typer.Option(30, help="Interrupted processes per variant."), seed: int = 0) -> None:
    generator = random.Random(seed)
    print(header("variant", "runs", "crashed (heap corruption, SIGSEGV)"))
    for variant in LSTM_VARIANTS:
        crashed = 0
        for _ in range(runs):
            process = subprocess.Popen(
                [sys.executable, "-c", LSTM_PROCESS, variant], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
            process.stdout.readline()  # "training": start-up is over
            time.sleep(generator.uniform(0.1, 2.0))  # while it trains
            process.send_signal(signal.SIGINT)
            process.communicate()
            crashed += process.returncode != 0  # it ends normally (0) unless the signal broke it
        print(f"| {variant} | {runs} | {crashed} |")


BUSY = "while True: sum(i * i for i in range(10000))"


@app.command()
def rank_exits(
    runs: int = typer.Option(50, help="Two-process trainings run to the end, one after another."),
    load: int = typer.Option(2, help="Busy processes beside them (one core each)."),
    out: Path = typer.Option(ROOT / "runs" / "rank-exits", help="Where the runs go (emptied first)."),
) -> None:
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    train, dev = write_manifests(out, 32, 8)  # as `resume`: every character of dev is in train
    settings = SETTINGS + [
        f"data.train={train}",
        f"data.dev={dev}",
        f"data.cache_dir={out / 'cache'}",
        "train.epochs=2",
    ]
    run_to_end(out / "warm-cache", settings, 2)
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(load)]
    failed: list[str] = []
    try:
        for number in range(runs):
            run = out / f"run-{number}"
            result = subprocess.run(command(run, settings, False, 2), env=environment(), capture_output=True, text=True)
            if result.returncode != 0:
                failed.append(f"run {number}: exit {result.returncode}: {result.stderr.strip()[-600:]}")
                print(failed[-1], flush=True)
            shutil.rmtree(run, ignore_errors=True)
    finally:
        for process in busy:
            process.kill()
    print(header("runs", "busy processes beside them", "not exiting 0"))
    print(row(runs, load, len(failed)))
    if failed:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
