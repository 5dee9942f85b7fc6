"""A run's `metrics.jsonl`: one JSON record per epoch, appended and flushed as the epoch ends, and
cut back to the checkpoint's epochs when a run resumes."""

from __future__ import annotations

import json
import os
import resource
import shutil
from pathlib import Path

from las.core.errors import LasError
from las.core.files import json_records, write_text_atomically
from las.core.progress import warn
from las.training.dev_evaluation import DevResult
from las.training.run_progress import Progress


def epoch_record(
    progress: Progress, dev: DevResult, seconds: float, learning_rate: float, teacher_forcing: float
) -> dict:
    """The line of `metrics.jsonl` for the epoch `progress` is finishing, `seconds` long."""
    batches = max(1, progress.loss_batches)
    alignment = dev.alignment
    return {
        "epoch": progress.epoch + 1,
        "step": progress.step,
        "train_loss": progress.loss_sum / batches,
        **{f"train_{name}": total / batches for name, total in progress.part_sums.items()},
        # The longest piece at the epoch's end, once utterances have been cut (las.training.pieces).
        **({"train_piece_frames": progress.piece_frames} if progress.piece_frames else {}),
        "dev_cer": dev.cer,  # what best.pt and the average are chosen on: dev_reading says what it is
        "dev_reading": dev.reading,
        "dev_wer": dev.wer,
        "dev_speller_cer": dev.speller_cer,  # the speller alone, greedy
        # How diagonal the attention of the first dev utterance (the plotted one) is.
        "dev_alignment_monotonic": alignment.monotonic if alignment else None,
        "dev_alignment_coverage": alignment.coverage if alignment else None,
        "dev_diagonal_share": round(dev.diagonal_share, 3),  # of all dev utterances
        "dev_ctc_cer": dev.ctc_cer,  # the CTC head alone, greedy
        "dev_joint_cer": dev.joint_cer,  # the two joined at decode.ctc_weight, greedy
        "seconds": round(seconds, 2),
        "elapsed_seconds": round(progress.elapsed + seconds, 2),
        "learning_rate": learning_rate,
        "teacher_forcing": teacher_forcing,
        "train_frames_per_second": round(progress.frames / max(progress.train_seconds, 1e-9)),
        "bad_batches": progress.bad_batches,
        "peak_memory_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def epoch_line(record: dict, best_cer: float) -> str:
    """The log's line for the epoch of `record` (an `epoch_record`)."""
    heads = f"  speller alone {record['dev_speller_cer']:.2f}%" if record["dev_joint_cer"] is not None else ""
    heads += f"  CTC head alone {record['dev_ctc_cer']:.2f}%" if record["dev_ctc_cer"] is not None else ""
    return (
        f"epoch {record['epoch']:3d}  loss {record['train_loss']:.3f}  dev CER {record['dev_cer']:6.2f}% "
        f"WER {record['dev_wer']:.2f}% ({record['dev_reading']}; best CER {best_cer:.2f}%){heads}  "
        f"{record['seconds']:.0f}s"
    )


def keep_metrics_until(path: Path, epochs: int) -> None:
    """Drop metric lines of epochs after the checkpoint (a run killed between log and save), and
    lines that are not whole records: cut short by a kill, or damaged in the middle of the file,
    which is first kept beside it (`metrics.jsonl.damaged`) with one warning."""
    if not path.exists():
        return
    records = json_records(path)
    damaged = records[:-1].count(None)  # the last line alone may be cut short by a kill
    if damaged:
        shutil.copyfile(path, path.with_name(path.name + ".damaged"))
        warn(f"{path}: {damaged} damaged line(s) left out (the file as it was: {path.name}.damaged)")
    kept = [record for record in records if record is not None and (epoch_of(record) or epochs + 1) <= epochs]
    write_text_atomically(path, "".join(json.dumps(record) + "\n" for record in kept))


def epoch_of(record: dict) -> int | None:
    try:
        return int(record["epoch"])
    except (ValueError, KeyError, TypeError):
        return None


def append_line(path: Path, line: str) -> None:
    """Append a line and flush it to the disk."""
    try:
        with open(path, "a") as file:
            file.write(line + "\n")
            file.flush()
            os.fsync(file.fileno())
    except OSError as error:
        raise LasError(f"cannot write {path}: {error.strerror or error}") from None
