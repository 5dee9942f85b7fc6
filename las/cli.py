"""The `las` command line: parse, call, report errors. No training or decoding logic lives here.

Options that name a config field (`--epochs`, `--train`, ...) are shorthands for `--set`: their
defaults are shown from `las.core.config`, the one place where defaults are defined.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import sys
import time
import typing
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer
from typer.core import TyperGroup

from las.core import config as config_module
from las.core.config import Config, load_config, named_setting
from las.core.errors import LasError, message_of
from las.core.settings import Flag, Section, field_hints
from las.core.threads import use_threads, wait_passively


class OneLineUsageErrors(TyperGroup):
    """Click's usage errors (an unknown option, a value out of its range, a missing argument)
    reported as las reports its own: one line on stderr, `error: ...`, here with exit code 2."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except typer.TyperException as error:
            # A bare `las` or `las cache` raises this once its help is printed (Typer tells it by name too).
            if type(error).__name__ != "NoArgsIsHelpError":
                context = getattr(error, "ctx", None)
                see = f" (see '{context.command_path} --help')" if context is not None else ""
                typer.echo(f"error: {' '.join(error.format_message().split())}{see}", err=True)
            sys.exit(error.exit_code)
        except typer.Abort:
            sys.exit(1)
        # Without standalone mode click returns the command's value, or the code of a typer.Exit.
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=OneLineUsageErrors,
    help="Listen, Attend and Spell: train character-level speech recognisers, decode, evaluate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
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
            typer.echo(f"error: {message_of(error)}", err=True)
            raise typer.Exit(1) from None

    return wrapper


def choices(name: str, literal: Any) -> type[StrEnum]:
    """A Typer choice option from the config's `Literal` of choices: one list for both."""
    return StrEnum(name, {value: value for value in typing.get_args(literal)})


Device = choices("Device", config_module.Device)
InputFormat = choices("InputFormat", config_module.InputFormat)
Precision = choices("Precision", config_module.Precision)


class Quantize(StrEnum):
    none = "none"
    int8 = "int8"


class OutputFormat(StrEnum):
    csv = "csv"
    kaldi = "kaldi"
    jsonl = "jsonl"
    srt = "srt"
    vtt = "vtt"


def print_version(asked: bool) -> None:
    """Eager: `las --version` prints and exits before click asks for a command."""
    if asked:
        from las import __version__

        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool, typer.Option("--version", callback=print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            min=1,
            envvar="LAS_THREADS",
            help="CPU threads at most, fewer while other processes keep cores busy (default: the cores "
            "this process may use; OMP_NUM_THREADS if set, then fixed).",
        ),
    ] = None,
) -> None:
    if "--help" not in sys.argv:  # help needs no torch, whose import takes a second
        use_threads(threads)


def config_options(section: type[Section]) -> Callable[[Function], Function]:
    """Give the command an option for every field of `section` that declares a `Flag`, with
    the field's default, choices and help: the command receives the ones given as `shorthands`,
    `{"decode.beam_size": 4}`, to apply as `--set` assignments. One declaration per setting."""
    defaults = section()
    hints = field_hints(section)

    def option(name: str, flag: Flag) -> inspect.Parameter:
        kind = typing.get_args(hints[name])[0]  # the field's type without its rules
        while typing.get_origin(kind) is Annotated:
            kind = typing.get_args(kind)[0]
        if typing.get_origin(kind) is Literal:
            kind = choices(flag.option.strip("-").title().replace("-", ""), kind)
        help_text = with_default(flag.help, getattr(defaults, name))
        annotation = Annotated[kind | None, typer.Option(flag.option, help=help_text, show_default=False)]
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)

    flags = {
        name: next(rule for rule in hint.__metadata__ if isinstance(rule, Flag))
        for name, hint in hints.items()
        if typing.get_origin(hint) is Annotated and any(isinstance(rule, Flag) for rule in hint.__metadata__)
    }
    options = [option(name, flag) for name, flag in flags.items()]

    def decorate(function: Function) -> Function:
        signature = inspect.signature(function, eval_str=True)
        parameters = [item for item in signature.parameters.values() if item.name != "shorthands"] + options

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in flags}
            shorthands = {f"{section.name}.{name}": str(value) for name, value in given.items() if value is not None}
            return function(*args, shorthands=shorthands, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {item.name: item.annotation for item in parameters}
        return wrapper  # type: ignore[return-value]

    return decorate


def as_assignments(shorthands: dict[str, Any]) -> list[str]:
    """`--set` strings for the shorthand options the user gave."""
    return [f"{key}={value}" for key, value in shorthands.items() if value is not None]


def with_default(text: str, value: Any) -> str:
    return f"{text} (default: {value if value != '' else 'none'})"


@app.command()
@reports_errors
def train(
    config: Annotated[
        Path | None, typer.Option("--config", help="TOML file of settings (sections as in las.core.config).")
    ] = None,
    train_manifest: Annotated[
        str | None, typer.Option("--train", help=with_default("Training manifest.", DEFAULTS.data.train))
    ] = None,
    dev_manifest: Annotated[
        str | None, typer.Option("--dev", help=with_default("Dev manifest, decoded every epoch.", DEFAULTS.data.dev))
    ] = None,
    out: Annotated[str | None, typer.Option("--out", help=with_default("Run directory.", DEFAULTS.train.out))] = None,
    epochs: Annotated[
        int | None, typer.Option("--epochs", help=with_default("Epochs to train.", DEFAULTS.train.epochs))
    ] = None,
    assignments: Annotated[
        list[str] | None, typer.Option("--set", help="Override a setting: KEY=VALUE, e.g. model.attention=dot.")
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out from its last.pt.")] = False,
    device: Annotated[
        Device | None, typer.Option("--device", help=with_default("Where to train.", DEFAULTS.train.device))
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help=with_default("Random seed.", DEFAULTS.train.seed))] = None,
    input_format: Annotated[
        InputFormat | None,
        typer.Option("--input-format", help=with_default("How to read --train and --dev.", DEFAULTS.data.input_format)),
    ] = None,
    init: Annotated[
        str | None,
        typer.Option("--init", help="Fine-tune: start from this trained checkpoint's weights (train.init)."),
    ] = None,
    precision: Annotated[
        Precision | None,
        typer.Option(
            "--precision",
            help=with_default(
                "Mixed precision: bf16 (Ampere+), fp16 (older GPUs), auto (the best this device runs).",
                DEFAULTS.train.precision,
            ),
        ),
    ] = None,
) -> None:
    """Train a model; with no arguments, on the bundled AN4 corpus into runs/an4/."""
    from las.training.initialisation import fine_tuning_base
    from las.training.train import train as run_training

    shorthands = {
        "data.train": train_manifest,
        "data.dev": dev_manifest,
        "train.out": out,
        "train.epochs": epochs,
        "train.device": device.value if device else None,
        "train.seed": seed,
        "train.precision": precision.value if precision else None,
        "data.input_format": input_format.value if input_format else None,
        "train.init": init,
    }
    overrides = as_assignments(shorthands) + list(assignments or [])
    # Fine-tuning changes the checkpoint's model, not the defaults': its settings are the base, read
    # before the others are checked (a model.* setting may be one only the checkpoint's model takes).
    init = named_setting(config, overrides, "train.init")
    base = fine_tuning_base(str(init)) if init and not resume else None
    settings = load_config(config, overrides, base=base)
    run = run_training(settings, resume=resume, assignments=overrides)
    typer.echo(f"best model: {run / 'best.pt'}")


@app.command()
@reports_errors
def pretrain(
    config: Annotated[
        Path | None, typer.Option("--config", help="TOML file of settings (model.* must match las train's).")
    ] = None,
    train_manifest: Annotated[
        str | None, typer.Option("--train", help=with_default("Transcripts to learn from.", DEFAULTS.data.train))
    ] = None,
    text: Annotated[
        Path | None,
        typer.Option(
            "--text", help="Also learn from this text, one sentence per line (spelled with the manifest's characters)."
        ),
    ] = None,
    dev_manifest: Annotated[
        str | None,
        typer.Option(
            "--dev",
            help=with_default(
                "Held-out transcripts: the epoch that predicts them best is saved ('' for the last epoch); "
                "by default data.dev where the settings name one, AN4's only with AN4's training set",
                DEFAULTS.data.dev,
            ),
        ),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Where the speller goes.")] = Path("runs/speller.pt"),
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Passes over the transcripts.")] = 20,
    assignments: Annotated[list[str] | None, typer.Option("--set", help="Override a setting: KEY=VALUE.")] = None,
) -> None:
    """Pre-train the speller as a character language model (attention context zeroed); start
    training from it with `las train --set train.speller_init=FILE`."""
    from las.core.files import check_writable
    from las.core.text import Vocabulary
    from las.data.corpora.manifest import read_utterances
    from las.training.pretrain import pretrain_speller, read_text_corpus, spellable

    check_writable(out, "--out")
    overrides = as_assignments({"data.train": train_manifest}) + list(assignments or [])
    settings = load_config(config, overrides)

    def transcripts(manifest: str) -> list[str]:
        return [utterance.text for utterance in read_utterances(manifest, input_format=settings.data.input_format)]

    texts = transcripts(settings.data.train)
    vocabulary = Vocabulary.from_texts(texts)  # as las train makes it from the same manifest
    if text is not None:
        texts += read_text_corpus(text, vocabulary)
    # AN4's dev set is no held-out text for another corpus's language model.
    named = settings.data.dev != DEFAULTS.data.dev or settings.data.train == DEFAULTS.data.train
    dev = dev_manifest if dev_manifest is not None else settings.data.dev if named else ""
    held_out = spellable(transcripts(dev), vocabulary, dev) if dev else []
    fit = pretrain_speller(settings, texts, out, epochs, vocabulary=vocabulary, held_out=held_out)
    typer.echo(f"language-model loss {fit.losses[0]:.3f} -> {fit.losses[-1]:.3f}")
    if fit.held_out:
        best = fit.held_out[fit.saved_epoch - 1]
        typer.echo(
            f"held out ({dev}): {fit.held_out[0]:.3f} -> {best:.3f} nats a character "
            f"(perplexity {math.exp(best):.2f}) at epoch {fit.saved_epoch} of {epochs}, the one saved"
        )
    typer.echo(f"speller saved to {out}")


@app.command()
@reports_errors
@config_options(config_module.DecodeConfig)
def decode(
    checkpoint: Annotated[
        Path,
        typer.Argument(
            metavar="CHECKPOINT",
            help="A las train checkpoint (best.pt, last.pt, averaged.pt, snapshots/epoch_NNN.pt) or export folder.",
        ),
    ],
    input_path: Annotated[
        Path,
        typer.Argument(
            metavar="INPUT", help="Manifest, data folder, HW4 features, audio file or folder (see --input-format)."
        ),
    ],
    input_format: Annotated[
        InputFormat, typer.Option("--input-format", help="How to read INPUT (auto: by what it is).")
    ] = InputFormat.auto,
    out: Annotated[Path | None, typer.Option("--out", help="Output file (default: stdout).")] = None,
    output_format: Annotated[
        OutputFormat,
        typer.Option(
            "--format",
            help="csv (id,label), kaldi text, jsonl (scores, n-best, segment and word times), or srt/vtt subtitles.",
        ),
    ] = OutputFormat.csv,
    assignments: Annotated[
        list[str] | None, typer.Option("--set", help="Override a decode setting, e.g. decode.length_normalize=true.")
    ] = None,
    plot_attention: Annotated[
        int, typer.Option("--plot-attention", min=0, help="Write attention heat-maps of the first N utterances.")
    ] = 0,
    plot_dir: Annotated[
        Path | None, typer.Option("--plot-dir", help="Where heat-maps go (default: next to --out).")
    ] = None,
    device: Annotated[Device, typer.Option("--device", help="Where to decode.")] = Device.auto,
    stream: Annotated[
        bool,
        typer.Option(
            "--stream",
            help="Decode as the audio arrives (INPUT `-`: 16-bit PCM on stdin, raw mono at the model's rate or WAV, "
            "or an audio file), writing JSON lines of partial and final results; a streaming model's.",
        ),
    ] = False,
    realtime: Annotated[
        bool, typer.Option("--realtime", help="With --stream, play the audio (a file, or stdin) at its own pace.")
    ] = False,
    *,
    shorthands: dict[str, Any],
) -> None:
    """Transcribe INPUT with a trained model into a submission/transcript file."""
    from las.recognition.decode import decode as run_decoding

    strategy = shorthands.get("decode.strategy")
    if "decode.beam_size" in shorthands and strategy not in (None, "beam"):
        raise LasError(f"--beam-size is a beam search setting; --strategy {strategy} would ignore it")
    overrides = as_assignments(shorthands) + list(assignments or [])
    if stream or realtime:
        from las.recognition.live import check_stream_options, stream_decode

        if not stream:
            raise LasError("--realtime plays a file to --stream; without --stream the file is decoded whole")
        check_stream_options(output_format.value, plot_attention)
        finals = stream_decode(checkpoint, input_path, out, overrides, device.value, realtime)
        typer.echo(f"streamed {finals} final segments", err=True)
        return
    recordings, timing = run_decoding(
        checkpoint,
        input_path,
        out,
        output_format.value,
        overrides,
        device.value,
        plot_attention,
        plot_dir,
        input_format.value,
    )
    typer.echo(
        f"decoded {recordings} recordings in {timing.seconds:.1f}s: "
        f"{recordings / max(timing.seconds, 1e-9):.1f} recordings/s, "
        f"real-time factor {timing.real_time_factor:.4f}",
        err=True,
    )


@app.command()
@reports_errors
def align(
    checkpoint: Annotated[Path, typer.Argument(metavar="CHECKPOINT", help="A checkpoint of a model with a CTC head.")],
    input_path: Annotated[
        Path, typer.Argument(metavar="DATA", help="Utterances with transcripts: manifest, data folder, HW4 features.")
    ],
    input_format: Annotated[
        InputFormat, typer.Option("--input-format", help="How to read DATA (auto: by what it is).")
    ] = InputFormat.auto,
    out: Annotated[Path | None, typer.Option("--out", help="CTM file to write (default: stdout).")] = None,
    device: Annotated[Device, typer.Option("--device", help="Where to run the model.")] = Device.auto,
) -> None:
    """Word times of the transcripts by CTC forced alignment, as CTM (utterance 1 start duration
    word): for train.augment.words, or to cut and inspect words."""
    from las.recognition.forced_alignment import align_file

    aligned, _ = align_file(checkpoint, input_path, out, input_format.value, device.value)
    typer.echo(f"aligned {aligned} utterances", err=True)


@app.command()
@reports_errors
def export(
    checkpoint: Annotated[
        Path, typer.Argument(metavar="CHECKPOINT", help="A checkpoint written by las train, or an export.")
    ],
    out: Annotated[Path, typer.Argument(metavar="OUT", help="The folder to write the ONNX graphs into.")],
    quantize: Annotated[
        Quantize, typer.Option("--quantize", help="int8: the matrix products' weights as int8 (dynamic).")
    ] = Quantize.none,
    decoding: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="decode.KEY=VALUE: how the export decodes unless told otherwise, e.g. its recipe's choices."
        ),
    ] = None,
) -> None:
    """The model as ONNX graphs (listener, CTC head, speller start and step) for ONNX Runtime:
    `las decode OUT INPUT` decodes with them, every strategy as with the checkpoint. From an
    export, its graphs are copied as they are, with `--set` on top of its decoding."""
    from las.export.runtime import load_model
    from las.export.writer import export as write_export

    quantized = "" if quantize == Quantize.none else quantize.value
    write_export(load_model(checkpoint), out, quantized, tuple(decoding or ()))


@app.command(name="eval")
@reports_errors
def evaluate(
    hypothesis: Annotated[
        Path, typer.Argument(metavar="HYP", help="Hypotheses: CSV, Kaldi text, JSONL or TSV manifest.")
    ],
    reference: Annotated[Path, typer.Argument(metavar="REF", help="References, in any of the same formats.")],
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of the text report.")
    ] = False,
    worst: Annotated[int, typer.Option("--worst", min=0, help="How many of the worst utterances to list.")] = 10,
    by_length: Annotated[bool, typer.Option("--by-length", help="Also report CER by reference length.")] = False,
    words: Annotated[
        int,
        typer.Option("--words", min=0, help="How many of the commonest confusion pairs, deleted and inserted words."),
    ] = 10,
    known: Annotated[
        Path | None,
        typer.Option(
            "--known",
            help="Training transcripts (any format REF may be): the reference words they lack, how each kind reads.",
        ),
    ] = None,
    ignore_case: Annotated[
        bool,
        typer.Option("--ignore-case", help="Compare without case (both sides case-folded), as sclite does by default."),
    ] = False,
) -> None:
    """Levenshtein report: mean edit distance per utterance, CER, WER, S/D/I, worst utterances, word errors."""
    import json

    from las.recognition.evaluate import evaluate_files, format_report

    report = evaluate_files(hypothesis, reference, worst, words, known, ignore_case)
    typer.echo(json.dumps(report.to_dict()) if json_output else format_report(report, by_length))


@app.command()
@reports_errors
def info(
    checkpoint: Annotated[
        Path, typer.Argument(metavar="CHECKPOINT", help="A checkpoint written by las train, or an export folder.")
    ],
) -> None:
    """What a checkpoint (or export) holds: its training progress, vocabulary and full configuration."""
    import json

    from las.core.text import SPECIALS
    from las.export.runtime import load_model

    loaded = load_model(checkpoint)
    progress = loaded.training_state.get("progress", {})
    if loaded.export is not None:
        quantize = json.loads((loaded.export / "model.json").read_text()).get("quantize") or "fp32"
        typer.echo(f"export        ONNX graphs ({quantize}) for ONNX Runtime")
    else:
        parameters = sum(tensor.numel() for tensor in loaded.model_state.values())
        typer.echo(f"parameters    {parameters / 1e6:.2f}M")
    if loaded.decoding:
        typer.echo(f"decodes with  {' '.join(loaded.decoding)} (unless --set says otherwise)")
    typer.echo(f"epochs        {progress.get('epoch', '?')} (step {progress.get('step', '?')})")
    typer.echo(f"best dev CER  {progress.get('best_cer', float('nan')):.2f}%")
    characters = loaded.vocabulary.symbols[len(SPECIALS) :]
    typer.echo(f"vocabulary    {len(characters)} characters {''.join(characters)!r} and {', '.join(SPECIALS)}")
    typer.echo(json.dumps(loaded.config.to_dict(), indent=2))


@app.command()
@reports_errors
def plot(
    runs: Annotated[list[Path], typer.Argument(metavar="RUN...", help="Run directories of las train.")],
    out: Annotated[Path, typer.Option("--out", help="The PNG to write.")] = Path("runs.png"),
) -> None:
    """Training loss and dev CER of runs side by side, against epochs and against minutes."""
    from las.core.files import check_writable
    from las.recognition.plots import plot_runs

    check_writable(out, "--out")
    plot_runs(runs, out)
    typer.echo(f"wrote {out}")


cache_app = typer.Typer(help="What the feature cache holds, and trimming it.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")
CacheDirectory = Annotated[
    str, typer.Option("--cache-dir", help="The cache root (data.cache_dir): auto is the user's cache folder.")
]


@cache_app.command(name="info")
@reports_errors
def cache_info(cache_dir: CacheDirectory = "auto") -> None:
    """Per feature-settings folder: size, entries, shards, orphan shards, last use and where its audio came from."""
    from las.data.cache.usage import cache_directory, human, survey

    root = cache_directory(cache_dir)
    folders = survey(root)
    typer.echo(f"{root}: {len(folders)} folder(s), {human(sum(folder.size for folder in folders))}")
    for folder in folders:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(folder.last_used))
        typer.echo(
            f"  {folder.path.name}  {human(folder.size):>10}  {folder.entries} entries in {folder.shards} shards, "
            f"{len(folder.orphans)} orphan(s), last used {used}"
        )
        for source, count in folder.sources[:3]:
            typer.echo(f"      {count:>8} from {source}")
        if len(folder.sources) > 3:
            typer.echo(
                f"      {sum(count for _, count in folder.sources[3:]):>8} from {len(folder.sources) - 3} other folders"
            )


@cache_app.command(name="prune")
@reports_errors
def cache_prune(
    older_than: Annotated[
        float | None, typer.Option("--older-than", help="Remove folders unused for these days.")
    ] = None,
    max_size: Annotated[
        str | None, typer.Option("--max-size", help="Keep at most this much (e.g. 20G), least recently used out first.")
    ] = None,
    cache_dir: CacheDirectory = "auto",
) -> None:
    """Remove orphan shards and temporaries, and whole folders by age or size; folders in use by a
    running process are left alone."""
    from las.data.cache.usage import cache_directory, human, parse_size, prune

    if older_than is not None and older_than < 0:
        raise LasError(f"--older-than {older_than:g}: expected days >= 0")
    removed, busy = prune(cache_directory(cache_dir), older_than, parse_size(max_size) if max_size else None)
    for removal in removed:
        typer.echo(f"removed {removal.path} ({human(removal.size)}): {removal.why}")
    for path in busy:
        typer.echo(f"left {path}: in use by a running process")
    typer.echo(f"freed {human(sum(removal.size for removal in removed))}")


def main() -> None:
    wait_passively()  # before anything imports torch
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:  # the reader of stdout went away (`las decode ... | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        sys.exit(1)
