"""The `las` command line: parse, call, report errors. No training or decoding logic lives here.

Options that name a config field (`--epochs`, `--train`, ...) are shorthands for `--set`: their
defaults are shown from `las.config`, the one place where defaults are defined.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from las.config import Config, load_config
from las.errors import LasError

app = typer.Typer(
    help="Listen, Attend and Spell: train character-level speech recognisers, decode, evaluate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
DEFAULTS = Config()
Function = TypeVar("Function", bound=Callable[..., Any])


def reports_errors(function: Function) -> Function:
    """User mistakes become one line on stderr and exit code 1 (no traceback)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except LasError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(1) from None

    return wrapper


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class OutputFormat(str, Enum):
    csv = "csv"
    kaldi = "kaldi"
    jsonl = "jsonl"


class StrategyName(str, Enum):
    greedy = "greedy"


@app.callback()
def main_options(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        from las import __version__

        typer.echo(__version__)
        raise typer.Exit()


def _default(text: str, value: Any) -> str:
    return f"{text} (default: {value})"


@app.command()
@reports_errors
def train(
    config: Annotated[Path | None, typer.Option("--config", help="TOML file of settings (sections as in las.config).")] = None,
    train_manifest: Annotated[str | None, typer.Option("--train", help=_default("Training manifest.", DEFAULTS.data.train))] = None,
    dev_manifest: Annotated[str | None, typer.Option("--dev", help=_default("Dev manifest, decoded every epoch.", DEFAULTS.data.dev))] = None,
    out: Annotated[str | None, typer.Option("--out", help=_default("Run directory.", DEFAULTS.train.out))] = None,
    epochs: Annotated[int | None, typer.Option("--epochs", help=_default("Epochs to train.", DEFAULTS.train.epochs))] = None,
    assignments: Annotated[list[str] | None, typer.Option("--set", help="Override a setting: KEY=VALUE, e.g. model.attention=dot.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out from its last.pt.")] = False,
    device: Annotated[Device | None, typer.Option("--device", help=_default("Where to train.", DEFAULTS.train.device))] = None,
    seed: Annotated[int | None, typer.Option("--seed", help=_default("Random seed.", DEFAULTS.train.seed))] = None,
) -> None:
    """Train a model; with no arguments, on the bundled AN4 corpus into runs/an4/."""
    from las.train import train as run_training

    shorthands = {
        "data.train": train_manifest,
        "data.dev": dev_manifest,
        "train.out": out,
        "train.epochs": epochs,
        "train.device": device.value if device else None,
        "train.seed": seed,
    }
    overrides = [f"{key}={value}" for key, value in shorthands.items() if value is not None] + list(assignments or [])
    settings = load_config(config, overrides)
    run = run_training(settings, resume=resume, assignments=overrides)
    typer.echo(f"best model: {run / 'best.pt'}")


@app.command()
@reports_errors
def decode(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint written by las train (best.pt or last.pt).")],
    input_path: Annotated[Path, typer.Argument(metavar="INPUT", help="TSV manifest, audio file, or folder of audio files.")],
    out: Annotated[Path | None, typer.Option("--out", help="Output file (default: stdout).")] = None,
    output_format: Annotated[OutputFormat, typer.Option("--format", help="csv (id,label), kaldi text, or jsonl.")] = OutputFormat.csv,
    strategy: Annotated[StrategyName, typer.Option("--strategy", help="Search strategy.")] = StrategyName.greedy,
    batch_size: Annotated[int | None, typer.Option("--batch-size", min=1, help=_default("Utterances per batch.", DEFAULTS.decode.batch_size))] = None,
    device: Annotated[Device, typer.Option("--device", help="Where to decode.")] = Device.auto,
) -> None:
    """Transcribe INPUT with a trained model into a submission/transcript file."""
    from las.decode import decode as run_decoding

    summary = run_decoding(checkpoint, input_path, out, output_format.value, strategy.value, batch_size, device.value)
    typer.echo(
        f"decoded {summary.utterances} utterances in {summary.seconds:.1f}s: "
        f"{summary.utterances / max(summary.seconds, 1e-9):.1f} utterances/s, real-time factor {summary.real_time_factor:.4f}",
        err=True,
    )


@app.command(name="eval")
@reports_errors
def evaluate(
    hypothesis: Annotated[Path, typer.Argument(metavar="HYP", help="Hypotheses: CSV, Kaldi text, JSONL or TSV manifest.")],
    reference: Annotated[Path, typer.Argument(metavar="REF", help="References, in any of the same formats.")],
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the text report.")] = False,
    worst: Annotated[int, typer.Option("--worst", min=0, help="How many of the worst utterances to list.")] = 10,
) -> None:
    """Levenshtein report: mean edit distance per utterance, CER, WER, S/D/I, worst utterances."""
    import json

    from las.evaluate import evaluate_files, format_report

    report = evaluate_files(hypothesis, reference, worst)
    typer.echo(json.dumps(report.to_dict()) if json_output else format_report(report))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
