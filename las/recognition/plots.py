"""Figures: attention heat-maps (output characters against encoder frames), and training curves
of runs side by side (`las plot`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on training machines

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from las.core.config import load_config  # noqa: E402
from las.core.errors import LasError  # noqa: E402
from las.core.files import json_records, write_atomically  # noqa: E402
from las.core.progress import warn  # noqa: E402
from las.core.settings import flat_settings  # noqa: E402
from las.core.text import EOS, Vocabulary  # noqa: E402
from las.search.common import Hypothesis  # noqa: E402


def plot_attention(weights: torch.Tensor, labels: Sequence[str], path: str | Path, title: str) -> None:
    """Save `weights` `(steps, encoder_frames)` with one row per emitted symbol in `labels`."""
    save(attention_figure(weights, labels, title), path)


def attention_figure(weights: torch.Tensor, labels: Sequence[str], title: str) -> Figure:
    """`weights` `(steps, encoder_frames)` as a heat-map, one row per emitted symbol in `labels`."""
    steps, frames = weights.shape
    width, height = max(4.0, frames / 8 + 2), max(3.0, steps / 5 + 1.5)  # inches
    # Margins fixed in inches for the one-character tick labels: `tight_layout` would draw the
    # figure twice to measure them, a third of a dev pass's plot (plotted every epoch).
    figure = Figure(figsize=(width, height))
    left, bottom, right, top = 0.7, 0.5, 0.15, 0.35
    axes = figure.add_axes((left / width, bottom / height, 1 - (left + right) / width, 1 - (bottom + top) / height))
    axes.imshow(weights.numpy(), aspect="auto", origin="upper", cmap="viridis", vmin=0.0, interpolation="nearest")
    axes.set_yticks(range(steps), [label if label != " " else "␣" for label in labels], fontsize=7)
    axes.set_xlabel("encoder frame")
    axes.set_ylabel("output character")
    axes.set_title(title, fontsize=9)
    return figure


def save(figure: Figure, path: str | Path) -> None:
    """As a PNG, written atomically: a reader never sees half a figure."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda file: figure.savefig(file, dpi=80, format="png"))
    plt.close(figure)


def hypothesis_figure(identifier: str, hypothesis: Hypothesis, vocabulary: Vocabulary) -> Figure | None:
    """The attention of one decoded utterance, titled with its id and text (None for CTC decoding)."""
    if hypothesis.attention is None:
        return None
    labels = [vocabulary.symbols[index] for index in hypothesis.tokens] + [EOS]
    return attention_figure(hypothesis.attention, labels, f"{identifier}: {vocabulary.decode(hypothesis.tokens)!r}")


def plot_hypothesis(identifier: str, hypothesis: Hypothesis, vocabulary: Vocabulary, path: str | Path) -> None:
    figure = hypothesis_figure(identifier, hypothesis, vocabulary)
    if figure is not None:
        save(figure, path)


def plot_runs(runs: Sequence[Path], path: str | Path) -> None:
    save(runs_figure(runs), path)


def runs_figure(runs: Sequence[Path]) -> Figure:
    """Training loss and dev CER of `runs` against epochs and against wall-clock minutes, one
    colour per run, labelled by its directory and the settings in which the runs differ; where a
    run's CTC head read dev too, its CER dashed beside the speller's (a speller that has not
    learnt to attend shows as a gap between the two)."""
    records = [read_metrics(run) for run in runs]
    labels = run_labels(runs)
    figure, axes = plt.subplots(2, 2, figsize=(11, 7), sharey="row")
    for number, (run_records, label) in enumerate(zip(records, labels, strict=True)):
        colour = f"C{number % 10}"
        epochs = [record["epoch"] for record in run_records]
        minutes = [record["elapsed_seconds"] / 60 for record in run_records]
        for row, key in enumerate(("train_loss", "dev_cer")):
            values = [record[key] for record in run_records]
            axes[row][0].plot(epochs, values, color=colour, label=label)
            axes[row][1].plot(minutes, values, color=colour, label=label)
        ctc = [
            (epoch, minute, record["dev_ctc_cer"])
            for epoch, minute, record in zip(epochs, minutes, run_records, strict=True)
            if "dev_ctc_cer" in record
        ]
        if ctc:
            ctc_epochs, ctc_minutes, values = zip(*ctc, strict=True)
            axes[1][0].plot(ctc_epochs, values, color=colour, linestyle="--", linewidth=1)
            axes[1][1].plot(ctc_minutes, values, color=colour, linestyle="--", linewidth=1)
    axes[0][0].set_ylabel("training loss")  # each row shares its axis: labelled once, on the left
    axes[1][0].set_ylabel("dev CER %, greedy, as models are kept\n(dashed: the CTC head alone)")
    for column, unit in enumerate(("epoch", "training minutes (dev passes included)")):
        axes[1][column].set_xlabel(unit)
        for row in range(2):
            axes[row][column].grid(alpha=0.3)
    axes[1][0].set_ylim(0, min(100, max(max(record["dev_cer"] for record in run) for run in records) * 1.05))
    # Above the plots, not in one: labels with settings are wider than an axis.
    figure.legend(*axes[0][0].get_legend_handles_labels(), loc="upper center", fontsize=8)
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.035 * len(runs)))
    return figure


def read_metrics(run: Path) -> list[dict]:
    """The epochs of `run/metrics.jsonl`, damaged lines left out with a warning; a missing or
    unreadable file is one clear error."""
    path = run / "metrics.jsonl"
    try:
        lines = json_records(path)
    except FileNotFoundError:
        raise LasError(f"{run}: no metrics.jsonl; is it a run directory of las train?") from None
    except OSError as error:
        raise LasError(f"cannot read {path}: {error.strerror or error}") from None
    records = [record for record in lines if record is not None]
    if len(records) < len(lines):
        warn(f"{path}: {len(lines) - len(records)} damaged line(s) left out of the plot")
    if not records or not all(
        {"epoch", "train_loss", "dev_cer", "elapsed_seconds"} <= record.keys() for record in records
    ):
        raise LasError(f"{path}: no epochs with train_loss, dev_cer and elapsed_seconds")
    return records


# Settings that say where a run is or how it reports, not what it learns.
UNLABELLED = {
    "train.out",
    "data.train",
    "data.dev",
    "data.cache_dir",
    "data.workers",
    "train.device",
    "train.log_every",
}


def run_labels(runs: Sequence[Path], most: int = 4) -> list[str]:
    """Each run's directory name (with its parent's where two runs share a name: `pieces/seed-1`
    beside `whole/seed-1`) and up to `most` settings in which the runs differ."""
    # A setting newer than a run's las: that run ran as its default does (a new setting's default
    # keeps what las did before it), not a difference to label.
    defaults = flat_settings(load_config(None, []).to_dict())
    settings = []
    for run in runs:
        try:
            settings.append(defaults | flat_settings(json.loads((run / "config.json").read_text())))
        except (OSError, ValueError):  # missing, or damaged: not UTF-8, not JSON
            settings.append({})
    # A setting las no longer has is left out: what it did is gone, or is another setting now.
    keys = sorted(defaults)
    differing = [
        key for key in keys if key not in UNLABELLED and len({json.dumps(values.get(key)) for values in settings}) > 1
    ]
    names = [run.name for run in runs]
    if len(set(names)) < len(names):
        names = [f"{run.resolve().parent.name}/{run.name}" for run in runs]
    return [
        name + (" (" + ", ".join(f"{key}={values.get(key)}" for key in differing[:most]) + ")" if differing else "")
        for name, values in zip(names, settings, strict=True)
    ]
