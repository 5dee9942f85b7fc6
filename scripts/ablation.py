"""Train recipe variants on AN4 under the same seeds and schedule, stop each after the same number
of epochs (Ctrl-C, which saves and exits), and print a Markdown table: dev CER, the first epoch at
which the attention of the fixed dev utterance was diagonal (argmax monotone for >= 90% of steps,
sweeping >= half the frames: las/model/alignment.py) and how often it still was in the last five
epochs, the share of all dev utterances decoded with a diagonal map by the best checkpoint,
seconds per epoch; and the CER of the long-form dev set (per speaker, the dev utterances joined
with 0.5 s of silence: scripts/longform.py build) decoded whole, without segmentation, beside the
same utterances decoded one by one, with the default decoding (beam 8 + CTC) and greedily by the
speller alone. With `--seeds N`, a row per seed and their mean ("never" diagonal counts as
stop_after + 1 in the mean of the first diagonal epoch).

    python scripts/longform.py build
    python scripts/ablation.py --stop-after 20 --parallel 2 [--only gmm --only monotonic ...] [--seeds 3]

Every variant keeps the default schedule (its `--epochs`), so the learning-rate and
teacher-forcing curves agree up to the stopping epoch; only the named settings differ. With
`--parallel N`, N variants train at once, each on one thread (on a small model that is more
throughput than N threads on one), so their seconds per epoch compare with each other only.
Finished variants are not retrained and unfinished ones resume from their last.pt: delete a
run directory to redo it.
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

from las.model.alignment import Alignment

SPELLER = "{speller}"  # replaced by the pre-trained speller's path
SMALL_TRANSFORMER = ["model.transformer_dim=192", "model.transformer_feedforward=768"]
SLOW_WARMUP = ["train.learning_rate=1e-3", "train.warmup_steps=1000"]
LARGE_BATCHES = ["data.batch_frames=17000", "train.warmup_steps=75"]
LARGE_BATCHES_LATE = [*LARGE_BATCHES, "train.specaugment_start_epoch=20", "train.augment.start_epoch=32"]
# The 2x recipe (data/an4/gpu.toml's schedule): 8,500-frame batches, augmentation after as many steps.
BATCHES_2X = [
    "data.batch_frames=8500",
    "train.warmup_steps=150",
    "train.specaugment_start_epoch=10",
    "train.augment.start_epoch=16",
]

VARIANTS: dict[str, list[str]] = {
    "location, cumulative (default)": [],
    "location, not cumulative": ["model.cumulative_attention=false"],
    "location, cumulative, no CTC": ["model.ctc_weight=0"],
    "location, cumulative, speller pre-trained as LM": [f"train.speller_init={SPELLER}"],
    "location, cumulative, single words 0.2 of draws": ["train.augment.words=0.2"],
    "location, cumulative, no single words": ["train.augment.words=0"],
    "location, cumulative, no non-speech": ["train.augment.nonspeech=0"],
    "location, cumulative, more background 0.2 of draws": ["train.augment.surroundings=0.2"],
    "location, cumulative, no mean prior": ["features.mean_prior_seconds=0"],
    "location, cumulative, no tight crops at the words": ["train.augment.tight=0"],
    "location, cumulative, reverberation 0.3 of draws": ["train.augment.reverberation=0.3"],
    "location, cumulative, dereverberation in training too": ["features.dereverberation=always"],
    # Self-attention (las/model/attention_listener.py, transformer_speller.py), each part at about
    # the parameters of the one it replaces: listener 2.4M, speller 0.6M (model.transformer_dim 192).
    "transformer listener, 5 layers of 192": [
        *SMALL_TRANSFORMER,
        "model.listener=transformer",
        "model.listener_layers=5",
    ],
    "conformer listener, 5 layers of 144": [
        "model.listener=conformer",
        "model.listener_layers=5",
        "model.transformer_dim=144",
        "model.transformer_feedforward=576",
    ],
    "transformer speller, 1 layer of 192": [*SMALL_TRANSFORMER, "model.speller=transformer"],
    # The same at a gentler schedule, as Transformers are usually trained (ESPnet's AN4 Transformer
    # warms up over most of its run): half the peak, reached after 1,000 steps (about 19 epochs).
    "transformer listener, 5 layers of 192, slow warm-up": [
        *SMALL_TRANSFORMER,
        *SLOW_WARMUP,
        "model.listener=transformer",
        "model.listener_layers=5",
    ],
    "transformer speller, 1 layer of 192, slow warm-up": [
        *SMALL_TRANSFORMER,
        *SLOW_WARMUP,
        "model.speller=transformer",
    ],
    "transformer listener and speller, 192": [
        *SMALL_TRANSFORMER,
        "model.listener=transformer",
        "model.listener_layers=5",
        "model.speller=transformer",
    ],
    # Fewer, larger batches (#28: a GPU step costs about the same for 4x the frames): batches by
    # frames of about 2x and 4x the default's 4,300 padded frames, the warm-up as many utterances long.
    "batches of 8,500 frames, warm-up 150 steps": ["data.batch_frames=8500", "train.warmup_steps=150"],
    "batches of 17,000 frames, warm-up 75 steps": LARGE_BATCHES,
    "batches of 17,000 frames, warm-up 75 steps, learning rate 4e-3": [*LARGE_BATCHES, "train.learning_rate=4e-3"],
    # ... with SpecAugment and the waveform augmentation starting after as many steps as the
    # default's (epochs 5 and 8 of 53 steps each): the attention first aligns on clean speech.
    "batches of 8,500 frames, warm-up 150 steps, augmentation after as many steps": BATCHES_2X,
    # ... with a microphone set too hot (#31: 6 epochs of it at 0.3 gained on clipped audio and
    # cost the room; whether a whole training does both).
    "batches of 8,500 frames, warm-up 150 steps, augmentation after as many steps, clipping 0.1 of draws": [
        *BATCHES_2X,
        "train.augment.clipping=0.1",
    ],
    "batches of 17,000 frames, warm-up 75 steps, augmentation after as many steps": LARGE_BATCHES_LATE,
    "batches of 17,000 frames, warm-up 75 steps, augmentation after as many steps, learning rate 4e-3": [
        *LARGE_BATCHES_LATE,
        "train.learning_rate=4e-3",
    ],
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


def scheduled_epochs(run: Path) -> int:
    """The epochs of the run's schedule (`train.epochs` of its config.json; unbounded before it is written)."""
    path = run / "config.json"
    return json.loads(path.read_text())["train"]["epochs"] if path.exists() else sys.maxsize


def start(run: Path, arguments: list[str], threads: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "las", "train", "--out", str(run), *arguments]
    if (run / "last.pt").exists():  # a run stopped before stop_after (a reboot, a kill) goes on
        command.append("--resume")
    # SIGINT back to its default in the child: a shell starts background jobs with it ignored,
    # and the Ctrl-C that stops training would then never arrive.
    return subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=open(log(run), "a"),  # noqa: SIM115 - the child owns it
        env={**os.environ, "OMP_NUM_THREADS": str(threads)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def settings_arguments(assignments: list[str]) -> list[str]:
    return [item for assignment in assignments for item in ("--set", assignment)]


def log(run: Path) -> Path:
    """Beside the run directory; not with_suffix, which would cut a name like "words-0.1-seed2"."""
    return run.parent / f"{run.name}.log"


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
    """Train every run in `jobs` (run directory -> its further `las train` arguments), `parallel`
    at a time, stopping each after `stop_after` epochs."""
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
            # A run whose schedule ends at stop_after finishes on its own: it averages its best
            # epochs into averaged.pt after the last, which a stop would cut off.
            if process.poll() is None and stop_after <= len(records(run)) and stop_after < scheduled_epochs(run):
                interrupt(process)
            if process.poll() is not None:
                if len(records(run)) < stop_after:  # the others go on: a failed run is a result too
                    print(f"{run} stopped after {len(records(run))} epochs; see {log(run)}")
                del running[run]


def best_checkpoint_alignment(run: Path) -> float:
    """Share of dev utterances whose greedy attention map is diagonal, for the run's best.pt: one
    utterance's map is a noisy signal, the whole dev set's is not."""
    import tempfile

    import torch

    from las import Recognizer
    from las.data.corpora.manifest import read_utterances
    from las.data.dataset import SpeechDataset
    from las.training.dev_evaluation import evaluate_dev

    # as training's dev pass hears it
    recognizer = Recognizer.load(run / "best.pt", "cpu", strategy="greedy", speed=1.0, other_speed=0)
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


COLUMNS = ["best", "dev utterances diagonal, best", "first diagonal epoch", "diagonal in last 5", "s/epoch"]
LONG_FORM = ["beam+CTC: one by one", "long-form whole", "x", "greedy: one by one", "long-form whole", "x"]


def run_directory(root: Path, name: str, seed: int) -> Path:
    """Seed 1 keeps the plain name, so runs trained before seeds were a choice are reused."""
    stem = name.replace(" ", "-").replace(",", "").replace("(", "").replace(")", "")
    return root / (stem if seed == 1 else f"{stem}-seed{seed}")


def summary(run: Path, stop_after: int, checkpoints: list[int]) -> list[float] | None:
    """One run's table cells as numbers (the first diagonal epoch is stop_after + 1 if never), or
    None if it stopped early. Long-form CER with the default decoding and greedily without CTC."""
    from longform import whole_against_one_by_one

    history = records(run)[:stop_after]
    if len(history) < stop_after:
        return None
    beam = whole_against_one_by_one(run / "best.pt")
    greedy = whole_against_one_by_one(run / "best.pt", strategy="greedy", ctc_weight=0.0)
    return [
        *(history[epoch - 1]["dev_cer"] for epoch in checkpoints),
        min(record["dev_cer"] for record in history),
        100 * best_checkpoint_alignment(run),
        next((record["epoch"] for record in history if diagonal(record)), stop_after + 1),
        sum(diagonal(record) for record in history[-5:]),
        sorted(record["seconds"] for record in history)[len(history) // 2],
        *(value for separate, whole in (beam, greedy) for value in (separate, whole, whole / separate)),
    ]


def cells(values: list[float], stop_after: int, checkpoints: list[int]) -> str:
    """A row's cells; counts of a single seed without decimals, means of several with one."""
    first = len(checkpoints) + 2  # the first diagonal epoch, then how often in the last five
    text = [f"{value:.1f}" for value in values[: first - 1]] + [f"{values[first - 1]:.0f}%"]
    text += ["never" if values[first] > stop_after else count(values[first]), f"{count(values[first + 1])}/5"]
    decimals = [1] + [1, 1, 2] * 2  # s/epoch, then one by one, whole and their ratio, twice
    text += [f"{value:.{places}f}" for places, value in zip(decimals, values[first + 2 :], strict=True)]
    return " | ".join(text)


def count(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


@app.command()
def main(
    stop_after: int = 20,
    parallel: int = 2,
    root: Path = Path("runs/ablation"),
    pretrain_epochs: int = 20,
    only: list[str] = typer.Option([], help="Only the variants whose names contain one of these (repeatable)."),
    seeds: int = typer.Option(1, help="Train seeds 1..N of every variant; a row per seed and their mean."),
) -> None:
    variants = {name: settings for name, settings in VARIANTS.items() if not only or any(o in name for o in only)}
    speller = root / "speller.pt"
    if any(SPELLER in setting for settings in variants.values() for setting in settings) and not speller.exists():
        subprocess.run(
            [sys.executable, "-m", "las", "pretrain", "--out", str(speller), "--epochs", str(pretrain_epochs)],
            check=True,
        )
    jobs = {
        run_directory(root, name, seed): [setting.replace(SPELLER, str(speller)) for setting in settings]
        + [f"train.seed={seed}"]
        for name, settings in variants.items()
        for seed in range(1, seeds + 1)
    }
    run_all({run: settings_arguments(settings) for run, settings in jobs.items()}, stop_after, parallel)
    checkpoints = sorted({5, 10, 15, stop_after})
    header = [f"dev CER @{epoch}" for epoch in checkpoints] + COLUMNS + LONG_FORM
    print("| variant | " + " | ".join(header) + " |")
    print("| --- " * (len(header) + 1) + "|")
    for name in variants:
        rows = []
        for seed in range(1, seeds + 1):
            run = run_directory(root, name, seed)
            values = summary(run, stop_after, checkpoints)
            label = name if seeds == 1 else f"{name}, seed {seed}"
            if values is None:
                print(f"| {label} | stopped after {len(records(run))} epochs (see its log) |")
                continue
            rows.append(values)
            print(f"| {label} | {cells(values, stop_after, checkpoints)} |")
        if seeds > 1 and rows:
            mean = [sum(column) / len(rows) for column in zip(*rows, strict=True)]
            print(f"| **{name}, mean of {len(rows)}** | {cells(mean, stop_after, checkpoints)} |")


if __name__ == "__main__":
    app()
