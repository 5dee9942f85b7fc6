"""What a training run reports while it runs, besides `metrics.jsonl`: TensorBoard event files
(`train.tensorboard`), Weights & Biases (`train.wandb_project`), and for batch jobs — stderr not
a terminal, where progress bars are off — a plain progress line every `train.log_every` steps.
Only rank 0 of a distributed run reports."""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from las.core.config import Config
from las.core.errors import LasError
from las.core.progress import say, warn
from las.core.settings import flat_settings

EXAMPLES = 4  # dev transcripts shown beside their references each epoch


@dataclasses.dataclass(frozen=True)
class StepValues:
    """One optimizer step, as logged."""

    step: int
    epoch: int  # counted from 1
    batch: int  # in the epoch, from 1
    batches: int  # in the epoch
    loss: float
    parts: dict[str, float]  # attention_loss and ctc_loss
    learning_rate: float
    teacher_forcing: float
    gradient_norm: float
    frames: int  # input frames of the global batch


class Monitor:
    def __init__(self, config: Config, out: Path, total_steps: int, enabled: bool = True) -> None:
        settings = config.train
        self.config = config
        self.every = settings.log_every
        self.total_steps = total_steps
        self.enabled = enabled
        self.lines = enabled and not sys.stderr.isatty()  # a terminal has the progress bar
        self.started = time.monotonic()
        self.first_step: int | None = None
        self.window_frames, self.window_started = 0, time.monotonic()
        self.writer = None
        self.wandb = None
        self.unaligned_said = False  # `unaligned` speaks once a run
        if not enabled:
            return
        if settings.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            threading.excepthook = quiet_event_writer(threading.excepthook)
            self.writer = SummaryWriter(str(out / "tensorboard"))
            text = "```\n" + json.dumps(config.to_dict(), indent=1) + "\n```"
            self.tensorboard(lambda writer: writer.add_text("config", text))
        if settings.wandb_project:
            self.wandb = start_wandb(settings.wandb_project, out, config)

    def step(self, values: StepValues) -> None:
        """Every `log_every` steps: scalars to TensorBoard and W&B, a line to a non-terminal stderr."""
        if not self.enabled:
            return
        if self.first_step is None:
            self.first_step = values.step - 1
        self.window_frames += values.frames
        if values.step % self.every:
            return
        now = time.monotonic()
        frames_per_second = self.window_frames / max(now - self.window_started, 1e-9)
        self.window_frames, self.window_started = 0, now
        scalars = {
            "train/loss": values.loss,
            **{f"train/{name}": value for name, value in values.parts.items()},
            "train/learning_rate": values.learning_rate,
            "train/teacher_forcing": values.teacher_forcing,
            "train/gradient_norm": values.gradient_norm,
            "train/frames_per_second": frames_per_second,
        }
        self.scalars(scalars, values.step)
        if self.lines:
            elapsed = now - self.started
            done = values.step - self.first_step
            remaining = elapsed / max(done, 1) * (self.total_steps - values.step)
            say(
                f"epoch {values.epoch} batch {values.batch}/{values.batches}  step {values.step}/{self.total_steps}  "
                f"loss {values.loss:.3f}  lr {values.learning_rate:.2e}  {frames_per_second:,.0f} frames/s  "
                f"elapsed {duration(elapsed)}  ETA {duration(remaining)}"
            )

    def epoch(self, record: dict[str, Any], attention: Path | None, examples: list[tuple[str, str, str]]) -> None:
        """After an epoch's dev pass: its figures, the attention map the trainer plotted to the
        PNG `attention` (None for none: read back, not drawn twice, which cost 8% of a short
        epoch) and `(id, reference, hypothesis)` examples."""
        if not self.enabled:
            return
        step = record["step"]
        names = ("cer", "wer", "diagonal_share", "speller_cer", "ctc_cer")  # ctc_cer: None without a CTC head
        dev = {f"dev/{name}": record[f"dev_{name}"] for name in names if record.get(f"dev_{name}") is not None}
        self.scalars({**dev, "train/epoch_loss": record["train_loss"]}, step)
        lines = "\n".join(
            f"| {identifier} | {reference} | {hypothesis} |" for identifier, reference, hypothesis in examples
        )
        table = "| id | reference | hypothesis |\n| --- | --- | --- |\n" + lines
        if self.writer is not None:

            def write(writer: Any) -> None:
                if attention is not None:
                    from matplotlib.image import imread

                    pixels = imread(attention)[..., :3]  # (height, width, RGB) in [0, 1]
                    writer.add_image("dev/attention", pixels, step, dataformats="HWC")
                writer.add_text("dev/transcripts", table, step)
                writer.flush()

            self.tensorboard(write)
        if self.wandb is not None:
            columns = ["id", "reference", "hypothesis"]
            logged: dict[str, Any] = {
                "dev/transcripts": self.wandb.Table(columns=columns, data=list(map(list, examples)))
            }
            if attention is not None:
                logged["dev/attention"] = self.wandb.Image(str(attention))
            self.wandb.log(logged, step=step)

    def unaligned(self, reason: str, step: int, advice: str) -> None:
        """Once a run, from `train.alignment_warning_steps` on: attention that has not aligned
        where the CTC head has learnt (`reason`: why, "" where it has), said in the log and beside
        the figures, with `advice`: what to do."""
        threshold = self.config.train.alignment_warning_steps
        if not self.enabled or self.unaligned_said or not threshold or step < threshold or not reason:
            return
        self.unaligned_said = True
        message = f"{reason}, after {step} steps. {advice}"
        warn(message)
        self.note("warnings/alignment", message, step)

    def note(self, tag: str, text: str, step: int) -> None:
        """A line of text beside the run's figures (TensorBoard's text tab, wandb's log)."""
        if not self.enabled:
            return

        def write(writer: Any) -> None:
            writer.add_text(tag, text, step)
            writer.flush()

        self.tensorboard(write)
        if self.wandb is not None:
            self.wandb.log({tag: text}, step=step)

    def tensorboard(self, write: Callable[[Any], None]) -> None:
        """`write(writer)` to the TensorBoard event file; where that fails (a full disk, a quota),
        one warning, and the run goes on without events: its checkpoints and metrics.jsonl are
        what it cannot lose, and their own writes stop it with one line if the disk stays full."""
        if self.writer is None:
            return
        try:
            write(self.writer)
        except OSError as error:
            self.writer = None
            warn(f"cannot write TensorBoard events ({error.strerror or error}): none for the rest of this run")

    def scalars(self, values: dict[str, float], step: int) -> None:
        def write(writer: Any) -> None:
            for name, value in values.items():
                writer.add_scalar(name, value, step)

        self.tensorboard(write)
        if self.wandb is not None:
            self.wandb.log(values, step=step)

    def close(self, best_cer: float) -> None:
        """The run's settings beside its best dev CER (TensorBoard's HPARAMS view), and flushes."""
        settings = {
            key: value if isinstance(value, (float, int, str, bool)) else str(value)
            for key, value in flat_settings(self.config.to_dict()).items()
        }

        def write(writer: Any) -> None:
            writer.add_hparams(settings, {"hparam/best_dev_cer": best_cer}, run_name=".")
            writer.close()

        self.tensorboard(write)
        if self.wandb is not None:
            self.wandb.summary["best_dev_cer"] = best_cer
            self.wandb.finish()


def quiet_event_writer(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """`threading.excepthook` without the traceback of TensorBoard's writer thread when its disk
    fails: the next event raises the same error in the main thread, which reports it in one line."""

    def quiet(arguments: Any) -> None:
        if not (type(arguments.thread).__name__ == "_AsyncWriterThread" and issubclass(arguments.exc_type, OSError)):
            hook(arguments)

    return quiet if getattr(hook, "__name__", "") != "quiet" else hook


def wandb_module(project: str) -> Any:
    """The wandb package, which `train.wandb_project` needs; checked before any work."""
    try:
        import wandb
    except ImportError:
        raise LasError(f"train.wandb_project={project} needs the wandb package: pip install wandb") from None
    return wandb


def start_wandb(project: str, out: Path, config: Config) -> Any:
    wandb = wandb_module(project)
    wandb.init(project=project, name=out.name, dir=str(out), config=dataclasses.asdict(config), resume="allow")
    return wandb


def duration(seconds: float) -> str:
    """`1h02m`, `3m05s` or `42s`."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"
