"""What the feature cache holds, and trimming it: `las cache info` and `las cache prune`.

The cache root (`data.cache_dir`, by default the user's cache folder) holds one folder per
feature settings (las/data/cache/store.py). A process that uses a folder holds a shared lock on its
`.lock` for the rest of its life and stamps `last-used`; pruning takes that lock exclusively and
leaves a folder in use alone. So a process that is reading never loses an entry: it may have
read the index and not yet mapped the shard an entry lies in.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from las.core.errors import LasError
from las.data.cache.index import FILE_NAME, LEGACY_FILE_NAME, CacheIndex

LOCK = ".lock"
LAST_USED = "last-used"


def cache_directory(setting: str | Path) -> Path:
    """Where `data.cache_dir` puts the cache: "auto" is the user's cache folder (XDG), so that
    decoding a file never litters the current directory."""
    if str(setting) != "auto":
        return Path(setting).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "las" / "features"


def use(folder: Path) -> IO[str] | None:
    """Mark `folder` in use by this process: a shared lock held until the returned file is closed
    (at the latest, when the process ends), and the time in `last-used`. None where the folder
    cannot be written (a read-only cache is nobody's to prune)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = open(folder / LOCK, "a+")  # noqa: SIM115 - held for the cache's life
        fcntl.flock(lock, fcntl.LOCK_SH)
        (folder / LAST_USED).write_text(f"{time.time():.0f}\n")
        return lock
    except OSError:
        return None


@contextlib.contextmanager
def unused(folder: Path) -> Iterator[bool]:
    """Whether no process uses `folder`; while True, none can start to."""
    try:
        lock = open(folder / LOCK, "a+")  # noqa: SIM115 - closed below
    except OSError:
        yield False
        return
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


@dataclass(frozen=True)
class Folder:
    """One feature-settings folder of the cache."""

    path: Path
    size: int  # bytes
    entries: int  # index rows
    shards: int
    orphans: list[Path]  # shards no index row names, temporary files, an index set aside as damaged
    sources: list[tuple[str, int]]  # the folders its audio came from, with their entry counts
    last_used: float  # seconds since the epoch (the index's time for a cache from before stamps)

    @classmethod
    def read(cls, path: Path) -> Folder:
        entries, named, folders = 0, set(), {}
        if (path / FILE_NAME).exists() or (path / LEGACY_FILE_NAME).exists():
            index = CacheIndex(path)
            entries, named, folders = index.summary()
            index.close()
        files = [item for item in path.iterdir() if item.is_file()]
        shards = [item for item in files if item.name.startswith("shard-") and item.suffix == ".npy"]
        temporary = [item for item in files if item.name.endswith((".tmp", ".damaged"))]
        orphans = [item for item in shards if item.name not in named] + temporary
        stamp = path / LAST_USED
        try:
            last_used = float(stamp.read_text())
        except (OSError, ValueError):
            last_used = max((item.stat().st_mtime for item in files), default=0.0)
        size = sum(item.stat().st_size for item in files)
        sources = sorted(folders.items(), key=lambda item: -item[1])
        return cls(path, size, entries, len(shards), orphans, sources, last_used)


def survey(root: Path) -> list[Folder]:
    """Every settings folder under the cache `root`, the most recently used first."""
    if not root.is_dir():
        return []
    folders = [Folder.read(path) for path in root.iterdir() if path.is_dir()]
    return sorted(folders, key=lambda folder: folder.last_used, reverse=True)


@dataclass(frozen=True)
class Removal:
    path: Path
    size: int
    why: str


def prune(
    root: Path, older_than_days: float | None = None, max_bytes: int | None = None
) -> tuple[list[Removal], list[Path]]:
    """Orphan shards and temporaries (always), then whole folders unused for `older_than_days`,
    then the least recently used folders until the cache holds at most `max_bytes`. Folders in
    use are left alone. Returns what was removed, and the folders skipped as in use."""
    removed, busy = [], []
    folders = survey(root)
    kept = sum(folder.size for folder in folders)
    now = time.time()
    for folder in reversed(folders):  # the least recently used first
        with unused(folder.path) as free:
            if not free:
                busy.append(folder.path)
                continue
            age_days = (now - folder.last_used) / 86400
            too_old = older_than_days is not None and age_days > older_than_days
            too_big = max_bytes is not None and kept > max_bytes
            if too_old or too_big:
                why = f"unused for {age_days:.0f} days" if too_old else "least recently used, over the size"
                shutil.rmtree(folder.path, ignore_errors=True)
                removed.append(Removal(folder.path, folder.size, why))
                kept -= folder.size
                continue
            for orphan in folder.orphans:
                size = orphan.stat().st_size
                with contextlib.suppress(FileNotFoundError):
                    orphan.unlink()
                removed.append(Removal(orphan, size, "no index row names it"))
                kept -= size
    return removed, busy


def parse_size(text: str) -> int:
    """Bytes of `500M`, `2G`, `1.5T` or a plain number."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper().removesuffix("B")
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(float(text))
    except ValueError:
        raise LasError(f"--max-size {text!r}: expected a size such as 500M, 20G or 1T") from None


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
