"""Writing files so that nothing is ever half-written or lost, and locking a run directory.

Every file las publishes (checkpoints, cache shards, transcripts, run records) goes through
`write_atomically`: written to a temporary name, flushed to the disk (fsync), then renamed over the
target, and the folder's entry flushed too. A reader, or a run after a crash or a power cut, sees
the old file or the new one, never part of one; a failed write (disk full) keeps the old file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, BinaryIO

import torch

from las.core.errors import LasError


def read_text(path: str | Path, setting: str = "") -> str:
    """A UTF-8 text file's content (a byte-order mark dropped); any failure one line, which
    names the `setting` that gave the path."""
    named = f"{setting}: " if setting else ""
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise LasError(f"{named}file not found: {path}") from None
    except UnicodeDecodeError as error:
        raise LasError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except OSError as error:
        raise LasError(f"{named}cannot read {path}: {error.strerror or error}") from None


def json_records(path: Path) -> list[dict | None]:
    """The JSON object of each non-empty line of a JSON-lines file las wrote (metrics.jsonl), None
    for a line that is not one: cut short by a kill, or damaged in the file (a torn write, a bad
    sector), whose bytes may not even be UTF-8. Each line stands alone: damage costs its own."""
    records: list[dict | None] = []
    for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
        if line.strip():
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            records.append(record if isinstance(record, dict) else None)
    return records


def write_atomically(path: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """Publish `path` with the bytes `write` puts in the file it is given; one LasError on failure."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        sync_directory(path.parent)
    except OSError as error:
        remove_quietly(temporary)
        raise LasError(f"cannot write {path}: {error.strerror or error}") from None
    except BaseException:  # interrupted (a second Ctrl-C): no temporary file left behind
        remove_quietly(temporary)
        raise


def remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def write_text_atomically(path: str | Path, text: str) -> None:
    write_atomically(path, lambda file: file.write(text.encode("utf-8")))


def save_atomically(path: str | Path, payload: object) -> None:
    """`torch.save` through `write_atomically`. torch.save turns an error of the file it writes
    (a full disk, a quota, an I/O error) into a RuntimeError that names no cause ("unexpected
    pos"): the file's own error is kept and raised instead, so that it is reported as one."""

    def save(file: BinaryIO) -> None:
        kept = KeptErrors(file)
        try:
            torch.save(payload, kept)
        except RuntimeError:
            if kept.error is not None:
                raise kept.error from None
            raise

    write_atomically(path, save)


class KeptErrors:
    """A binary file that remembers the OSError its `write` raised."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.file.write(data)
        except OSError as error:
            self.error = error
            raise

    def flush(self) -> None:
        self.file.flush()


def sync_directory(directory: Path) -> None:
    """Flush a folder's entries, so that a rename into it survives a crash."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def make_directory(path: str | Path, purpose: str) -> Path:
    """`path` as a folder, created with its parents; one LasError when it cannot be."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise LasError(f"{purpose} {path}: a file is in the way (not a folder)") from None
    except OSError as error:
        raise LasError(f"{purpose} {path}: cannot create it: {error.strerror or error}") from None
    return path


def check_writable(path: str | Path, purpose: str) -> None:
    """Fail now, before any work, if the file `path` could not be written later."""
    path = Path(path)
    if path.is_dir():
        raise LasError(f"{purpose} {path}: is a folder; name a file")
    make_directory(path.parent, f"{purpose}'s folder")
    probe = path.with_name(f".{path.name}.{os.getpid()}.probe")
    try:
        probe.open("wb").close()
        probe.unlink()
    except OSError as error:
        raise LasError(f"{purpose} {path}: cannot write there: {error.strerror or error}") from None


@contextmanager
def locked_directory(directory: Path) -> Iterator[None]:
    """Hold an OS lock on `directory` (flock on `directory/.lock`) for the body's life, so that a
    second process cannot train or export into it at the same time. The kernel releases the lock
    when the process ends in any way, so a crash never leaves a held lock behind; an orderly end
    also removes the file, so that a finished run or export carries none."""
    path = directory / ".lock"
    while True:
        file = open(path, "a+")
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            holder = file.read().strip() or "?"
            file.close()
            raise LasError(
                f"{directory} is in use by another las process (pid {holder}); "
                "wait for it to end or choose another --out"
            ) from None
        if same_file(file, path):
            break
        file.close()  # its holder removed the file as we opened it: lock the one there now
    with file:
        file.truncate(0)
        file.write(f"{os.getpid()}\n")
        file.flush()
        try:
            yield
        finally:
            path.unlink(missing_ok=True)  # while still held, so no one locks the file we remove
            fcntl.flock(file, fcntl.LOCK_UN)


def same_file(file: IO[str], path: Path) -> bool:
    """Whether the open `file` is still the one at `path` (not removed or replaced since)."""
    try:
        return os.path.samestat(os.fstat(file.fileno()), path.stat())
    except FileNotFoundError:
        return False
