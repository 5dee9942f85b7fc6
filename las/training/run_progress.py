"""Where a training run stands: what every checkpoint saves so that `--resume` continues exactly."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from las.core.errors import LasError
from las.training.averaging import Snapshot


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint so that `--resume` continues exactly."""

    epoch: int = 0  # epochs completed
    batch_in_epoch: int = 0  # batches of epoch `epoch + 1` already trained on (non-zero after Ctrl-C)
    step: int = 0  # optimizer steps
    best_cer: float = math.inf
    bad_batches: int = 0
    elapsed: float = 0.0  # seconds spent on completed epochs
    # Sums over the current epoch so far:
    loss_sum: float = 0.0
    part_sums: dict[str, float] = field(default_factory=dict)  # attention and CTC parts of loss_sum
    loss_batches: int = 0
    frames: int = 0
    train_seconds: float = 0.0
    rng: dict[str, Any] = field(default_factory=dict)
    snapshots: list[Snapshot] = field(default_factory=list)  # the epochs kept for averaging
    # The first step that had the CTC head's alignment to cut its utterances at or to guide the
    # attention by (the head had learnt): their schedules count from there (las.training.attention_start).
    alignment_start: int | None = None
    # Long utterances in pieces (las.training.pieces): the longest now in frames (None: the first
    # length), the step they took it, and a moving average of the share of each step's pieces
    # attended along a diagonal since.
    piece_frames: int | None = None
    pieces_since: int | None = None
    pieces_aligned: float = 0.0
    # The last step's CTC loss per character: no alignment pass is due while it is over the
    # trigger (kept here so that a resumed run cuts its first batch as an unbroken one would).
    ctc_loss: float | None = None

    @classmethod
    def saved(cls, values: dict[str, Any]) -> Progress:
        """The progress a checkpoint saved (`vars` of one), from any las that saved it."""
        values = dict(values)
        if "guide_start" in values:  # its name in runs saved before 2026-11-29
            values["alignment_start"] = values.pop("guide_start")
        return cls(**values)

    def record(self, loss: float, parts: dict[str, float], frames: int) -> None:
        """One optimizer update done: counted only now, so a resume never skips a batch."""
        self.batch_in_epoch += 1
        self.step += 1
        self.loss_sum += loss
        self.loss_batches += 1
        for name, value in parts.items():
            self.part_sums[name] = self.part_sums.get(name, 0.0) + value
        self.frames += frames

    def skip_bad_batch(self, max_bad_batches: int) -> None:
        """A batch whose loss or gradient is not finite is skipped; too many of them stop training."""
        self.batch_in_epoch += 1
        self.bad_batches += 1
        if self.bad_batches > max_bad_batches:
            raise LasError(
                f"training diverged: {self.bad_batches} batches with a non-finite loss (lower train.learning_rate?)"
            )

    def next_epoch(self, dev_cer: float, seconds: float) -> Progress:
        """The progress at the start of the following epoch: totals kept, epoch sums cleared."""
        return Progress(
            epoch=self.epoch + 1,
            step=self.step,
            best_cer=min(self.best_cer, dev_cer),
            bad_batches=self.bad_batches,
            elapsed=self.elapsed + seconds,
            snapshots=self.snapshots,
            alignment_start=self.alignment_start,
            piece_frames=self.piece_frames,
            pieces_since=self.pieces_since,
            pieces_aligned=self.pieces_aligned,
            ctc_loss=self.ctc_loss,
        )
