"""Train recipe variants on AN4 under one seed and one schedule, stop each after the same number
of epochs (Ctrl-C, which saves and exits), and print a Markdown table: dev CER, the first epoch at
which the attention of the fixed dev utterance was diagonal (argmax monotone for >= 90% of steps,
sweeping >= half the frames: las/alignment.py) and how often it still was in the last five
epochs, the share of all dev utterances decoded with a diagonal map by the best checkpoint,
seconds per epoch; and the CER of the long-form dev set (per speaker, the dev utterances joined
with 0.5 s of silence: scripts/longform.py build) decoded whole, without segmentation, beside the
same utterances decoded one by one, both with the default decoding (beam 8 + CTC).

    python scripts/longform.py build
    python scripts/ablation.py --stop-after 20 --parallel 2 [--only gmm --only monotonic ...]

Every variant keeps the default schedule (its `--epochs`), so the learning-rate and
teacher-forcing curves agree up to the stopping epoch; only the named settings differ. With
`--parallel N`, N variants train at once, each on one thread (on a small model that is more
throughput than N threads on one), so their seconds per epoch compare with each other only.
Finished variants are not retrained: delete their run directory to redo one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import typer

from las.alignment import Alignment

SPELLER = "{speller}"  # replaced by the pre-trained speller's path

VARIANTS: dict[str, list[str]] = {
    "location, cumulative (default)": [],
    "location, not cumulative": ["model.cumulative_attention=false"],
    "location, cumulative, no CTC": ["model.ctc_weight=0"],
    "location, cumulative, speller pre-trained as LM": [f"train.speller_init={SPELLER}"],
    "dot": ["model.attention=dot"],
    "scaled dot": ["model.attention=scaled_dot"],
    "general (bilinear)": ["model.attention=general"],
    "additive": ["model.attention=additive"],
    "multi-head scaled dot, 4 heads": ["model.attention=scaled_dot", "model.attention_heads=4"],
    "multi-head location, cumulative, 4 heads": ["model.attention_heads=4"],
    "GMM location, 5 mixtures (V2)": ["model.attention=gmm"],
    "monotonic (hard at decoding)": ["model.attention=monotonic"],
    "MoChA, chunk 4": ["model.attention=monotonic_chunk"],
}

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def records(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def start(run: Path, assignments: list[str], threads: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "las", "train", "--out", str(run)]
    command += [item for assignment in assignments for item in ("--set", assignment)]
    # SIGINT back to its default in the child: a shell starts background jobs with it ignored,
    # and the Ctrl-C that stops training would then never arrive.
    return subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=open(run.with_suffix(".log"), "w"),  # noqa: SIM115 - the child owns it
        env={**os.environ, "OMP_NUM_THREADS": str(threads)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def interrupt(process: subprocess.Popen) -> None:
    """Ctrl-C a training run and wait for it to save and exit. Again every few seconds: a SIGINT
    that lands while the run forks its loader workers is swallowed by an at-fork handler."""
    while process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            continue


def run_all(jobs: dict[Path, list[str]], stop_after: int, parallel: int) -> None:
    """Train every run in `jobs`, `parallel` at a time, stopping each after `stop_after` epochs."""
    waiting = [run for run in jobs if len(records(run)) < stop_after]
    running: dict[Path, subprocess.Popen] = {}
    threads = max(1, (os.cpu_count() or 1) // parallel)
    while waiting or running:
        while waiting and len(running) < parallel:
            run = waiting.pop(0)
            run.parent.mkdir(parents=True, exist_ok=True)
            running[run] = start(run, jobs[run], threads)
        time.sleep(2)
        for run, process in list(running.items()):
            if process.poll() is None and len(records(run)) >= stop_after:
                interrupt(process)
            if process.poll() is not None:
                if len(records(run)) < stop_after:  # the others go on: a failed run is a result too
                    print(f"{run} stopped after {len(records(run))} epochs; see {run.with_suffix('.log')}")
                del running[run]


def best_checkpoint_alignment(run: Path) -> float:
    """Share of dev utterances whose greedy attention map is diagonal, for the run's best.pt: one
    utterance's map is a noisy signal, the whole dev set's is not."""
    import tempfile

    import torch

    from las import Recognizer
    from las.data.dataset import SpeechDataset
    from las.data.manifest import read_utterances
    from las.train import evaluate_dev

    recognizer = Recognizer.load(run / "best.pt", "cpu", strategy="greedy")
    config = recognizer.checkpoint.config
    utterances, features = recognizer.utterance_features(read_utterances(config.data.dev), config.data.dev)
    dataset = SpeechDataset(  # with the transcripts, which evaluate_dev scores against
        [utterance.id for utterance in utterances],
        features,
        [utterance.text for utterance in utterances],
        recognizer.vocabulary,
        with_targets=False,
        normalizer=recognizer.checkpoint.normalizer,
    )
    with tempfile.TemporaryDirectory() as directory:
        plot = Path(directory) / "attention.png"
        result = evaluate_dev(recognizer.model, dataset, recognizer.strategy, config, torch.device("cpu"), plot)
    return result.diagonal_share


def diagonal(record: dict) -> bool:
    """Whether the attention of the fixed dev utterance was diagonal after this epoch."""
    return Alignment(record["dev_alignment_monotonic"] or 0.0, record["dev_alignment_coverage"] or 0.0).diagonal


@app.command()
def main(
    stop_after: int = 20,
    parallel: int = 2,
    root: Path = Path("runs/ablation"),
    pretrain_epochs: int = 20,
    only: list[str] = typer.Option([], help="Only the variants whose names contain one of these (repeatable)."),
) -> None:
    from longform import whole_against_one_by_one

    variants = {name: settings for name, settings in VARIANTS.items() if not only or any(o in name for o in only)}
    speller = root / "speller.pt"
    if any(SPELLER in setting for settings in variants.values() for setting in settings) and not speller.exists():
        subprocess.run(
            [sys.executable, "-m", "las", "pretrain", "--out", str(speller), "--epochs", str(pretrain_epochs)],
            check=True,
        )
    jobs = {
        root / name.replace(" ", "-").replace(",", "").replace("(", "").replace(")", ""): [
            setting.replace(SPELLER, str(speller)) for setting in settings
        ]
        for name, settings in variants.items()
    }
    run_all(jobs, stop_after, parallel)
    checkpoints = sorted({5, 10, 15, stop_after})
    print(
        "| variant | "
        + " | ".join(f"dev CER @{epoch}" for epoch in checkpoints)
        + " | best | dev utterances diagonal, best | first diagonal epoch | diagonal in last 5 | s/epoch"
        + " | beam+CTC: one by one | long-form whole | x |"
    )
    print("| --- " * (len(checkpoints) + 9) + "|")
    for name, run in zip(variants, jobs, strict=True):
        history = records(run)[:stop_after]
        if len(history) < stop_after:
            print(f"| {name} | stopped after {len(history)} epochs (see its log) |")
            continue
        cells = " | ".join(f"{history[epoch - 1]['dev_cer']:.1f}" for epoch in checkpoints)
        best = min(record["dev_cer"] for record in history)
        seconds = sorted(record["seconds"] for record in history)[len(history) // 2]
        first = next((record["epoch"] for record in history if diagonal(record)), "never")
        recent = sum(diagonal(record) for record in history[-5:])
        share = best_checkpoint_alignment(run)
        separate, whole = whole_against_one_by_one(run / "best.pt")
        print(
            f"| {name} | {cells} | {best:.1f} | {share:.0%} | {first} | {recent}/5 | {seconds:.1f} | "
            f"{separate:.1f} | {whole:.1f} | {whole / separate:.2f} |"
        )


if __name__ == "__main__":
    app()
