"""Fine-tuning to about 5 minutes of a domain the model never heard (#29): speakers held out of a
reduced AN4 training run, through a telephone line, transcribed in lower case.

    python scripts/adaptation.py build               # the sets, once
    python scripts/adaptation.py train --seeds 3     # base models, then fine-tuned, then from scratch
    python scripts/adaptation.py measure --seeds 3   # CER on the domain, and training minutes

`build` writes under `runs/adaptation/`:

    base-train.tsv   AN4 train without the held-out speakers (and its word times, base-train.ctm)
    adapt-train.tsv  whole AN4 training speakers, drawn with a fixed seed, until they make 5 minutes:
                     through the telephone line, transcripts in lower case
    adapt-dev.tsv    the next speakers, until 1 minute, the same way (the fine-tuning's dev set)
    test.tsv         AN4 dev (8 more speakers, heard by none of the runs) the same way

`train` runs, per seed: `base` (the default recipe on base-train, stopped after 20 epochs as the
ablation's runs are), `finetuned` (`las train --init base/best.pt --config
data/recipes/finetune.toml` on adapt-train) and `scratch` (the default recipe on adapt-train alone).
`measure` decodes test.tsv with each run's best checkpoint (default decoding) and scores it as
spelled and case-folded (the base model has no lower-case letters to spell with).
"""

from __future__ import annotations

import csv
import json
import random
import statistics
from collections import defaultdict
from pathlib import Path

import soundfile
import torch
import typer
from ablation import records, run_all
from harness import header
from robustness import DEV, RATE, ROOT, summary, transcribe, write_set

from las.core.metrics import character_error_rate
from las.data.augmentation.channel_effects import telephone
from las.recognition.transcripts import read_transcripts

TRAIN = ROOT / "data" / "an4" / "train.tsv"
OUT = ROOT / "runs" / "adaptation"
ADAPT_SECONDS, ADAPT_DEV_SECONDS = 300.0, 60.0
BASE_EPOCHS = 20  # of the default 100-epoch schedule, as every 3-seed comparison of the ablation
FINETUNE_EPOCHS = 30  # ~7 batches an epoch: the recipe's 6 epochs would not pass its warm-up
SCRATCH_EPOCHS = 100

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def read_rows(manifest: Path) -> list[dict[str, str]]:
    with manifest.open(newline="") as file:
        return list(csv.DictReader(file, delimiter="\t"))


def speaker(row: dict[str, str]) -> str:
    return row["id"].split("-")[1]  # an4 ids: <prompt>-<speaker>-<b>


def held_out(rows: list[dict[str, str]], seed: int) -> tuple[list[str], list[str]]:
    """Speakers for fine-tuning (ADAPT_SECONDS of their speech) and for its dev set (ADAPT_DEV_SECONDS)."""
    seconds: dict[str, float] = defaultdict(float)
    for row in rows:
        seconds[speaker(row)] += float(row["duration_s"])
    order = sorted(seconds)
    random.Random(seed).shuffle(order)
    groups: tuple[list[str], list[str]] = ([], [])
    for group, goal in zip(groups, (ADAPT_SECONDS, ADAPT_DEV_SECONDS), strict=True):
        while sum(seconds[name] for name in group) < goal:
            group.append(order.pop(0))
    return groups


def in_domain(out: Path, name: str, rows: list[dict[str, str]], folder: Path) -> None:
    """`rows` (audio under `folder`) through the telephone line, transcripts in lower case."""
    items = []
    for row in rows:
        waveform = torch.from_numpy(soundfile.read(folder / row["path"], dtype="float32")[0])
        items.append((row["id"], telephone(waveform, RATE), row["text"].lower()))
    write_set(out, name, items)


@app.command()
def build(out: Path = OUT, seed: int = 0) -> None:
    """Write the base training manifest and the domain's sets."""
    rows = read_rows(TRAIN)
    adapt, adapt_dev = held_out(rows, seed)
    out.mkdir(parents=True, exist_ok=True)
    base = [row for row in rows if speaker(row) not in adapt + adapt_dev]
    lines = ["id\tpath\tduration_s\ttext"]
    lines += [f"{row['id']}\t{TRAIN.parent / row['path']}\t{row['duration_s']}\t{row['text']}" for row in base]
    (out / "base-train.tsv").write_text("\n".join(lines) + "\n")
    kept = {row["id"] for row in base}
    ctm = TRAIN.with_suffix(".ctm").read_text().splitlines()  # ";; ID sha256 DIGEST" lines, then "ID ..." lines
    (out / "base-train.ctm").write_text(
        "\n".join(line for line in ctm if line.removeprefix(";;").split()[0] in kept) + "\n"
    )
    print(f"base-train: {len(base)} utterances; held out {len(adapt)} + {len(adapt_dev)} speakers")
    in_domain(out, "adapt-train", [row for row in rows if speaker(row) in adapt], TRAIN.parent)
    in_domain(out, "adapt-dev", [row for row in rows if speaker(row) in adapt_dev], TRAIN.parent)
    in_domain(out, "test", read_rows(DEV), DEV.parent)


def run_directory(out: Path, kind: str, seed: int) -> Path:
    return out / (kind if seed == 1 else f"{kind}-seed{seed}")


@app.command()
def train(out: Path = OUT, seeds: int = 3, parallel: int = 3) -> None:
    """The base models, then each fine-tuned, and the same recipe from scratch on the 5 minutes."""
    domain = ["--set", f"data.train={out / 'adapt-train.tsv'}", "--set", f"data.dev={out / 'adapt-dev.tsv'}"]

    def jobs(kind: str, arguments: list[str], init: str = "") -> dict[Path, list[str]]:
        """Per seed: its run directory -> its arguments, starting from that seed's `init` run."""
        return {
            run_directory(out, kind, seed): [*arguments, "--seed", str(seed)]
            + (["--init", str(run_directory(out, init, seed) / "best.pt")] if init else [])
            for seed in range(1, seeds + 1)
        }

    run_all(jobs("base", ["--set", f"data.train={out / 'base-train.tsv'}"]), BASE_EPOCHS, parallel)
    recipe = ["--config", "data/recipes/finetune.toml", "--epochs", str(FINETUNE_EPOCHS)]
    run_all(jobs("finetuned", [*recipe, *domain], init="base"), FINETUNE_EPOCHS, parallel)
    run_all(jobs("scratch", ["--epochs", str(SCRATCH_EPOCHS), *domain]), SCRATCH_EPOCHS, parallel)


def error_rate(hypotheses: dict[str, str], manifest: Path, fold_case: bool) -> float:
    references = read_transcripts(manifest)
    identifiers = sorted(references)
    spelled = [hypotheses[i].lower() if fold_case else hypotheses[i] for i in identifiers]
    return character_error_rate(spelled, [references[i] for i in identifiers])


@app.command()
def measure(out: Path = OUT, seeds: int = 3) -> None:
    """CER on the domain's test set (AN4 dev's speakers) per kind of run, as spelled and with case
    folded (the base model has no lower-case letters), mean over the seeds."""
    test = out / "test.tsv"
    print(header("model", "test CER, as spelled", "test CER, case folded", "training epochs", "training minutes, each"))
    for kind in ("base", "finetuned", "scratch"):
        runs = [run_directory(out, kind, seed) for seed in range(1, seeds + 1)]
        hypotheses = [transcribe(run / "best.pt", test, []) for run in runs]
        rates = {fold: [error_rate(found, test, fold) for found in hypotheses] for fold in (False, True)}
        minutes = [sum(record["seconds"] for record in records(run)) / 60 for run in runs]
        epochs = statistics.mean(len(records(run)) for run in runs)
        print(f"| {kind} | {summary(rates[False])} | {summary(rates[True])} | {epochs:.0f} | {summary(minutes)} |")
        (out / f"{kind}.json").write_text(json.dumps({"cer": rates, "minutes": minutes}) + "\n")


if __name__ == "__main__":
    app()
