"""The on-disk feature cache: shards of features, memory-mapped for reading, and an index.

Layout under `<cache_dir>/<digest of the feature settings>/`:

    shard-<id>.npy  `(frames, dim)`: the features of a chunk of utterances, end to end; float16
                    log-mels computed from audio, or precomputed features (HW4P2's per-utterance
                    `.npy` files) copied as they are, float32
    index.jsonl     one line per cached utterance: its key, shard, offset, frame count, checksum

An utterance's key is the sha256 of its file's bytes plus its segment and speed factor, so a
renamed or moved file is still found and an edited one is recomputed. Each line also records the
path, size, modification time, inode and change time the key was computed from, so that a later
run re-hashes only files that changed: the change time catches a file replaced with its size and
modification time kept (`cp -p`, `rsync -t`, `tar`), which no tool can set back.

The cache never serves features it cannot vouch for. Each index line carries a checksum of
itself, and each entry one of its frames; before a process first serves an entry it
checks the entry against its shard (shape, bounds, checksum), unless the shard and its entries
are unchanged since they were last found intact (las/data/checked_shards.py): a run reads no
features to open a cache it has used before. Damaged lines and entries (a
truncated, overwritten or deleted shard, shifted offsets) are dropped and recomputed with a
warning. Shards are written under a temporary name, flushed and renamed before their index
lines are appended, so a killed run leaves no entry pointing at a half-written shard; a cache that
cannot be written (read-only, disk full) degrades to features computed in memory for the run.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from las.config import FeatureConfig
from las.data.audio import Segment, load_audio, read_bytes
from las.data.cache_usage import cache_directory, use
from las.data.checked_shards import CheckedShards
from las.data.features import (
    FEATURE_VERSION,
    FeatureSet,
    FilterbankExtractor,
    InMemoryFeatures,
    change_speed,
    log_mel_features,
)
from las.data.manifest import Utterance, read_feature_file, report_skipped
from las.errors import LasError
from las.files import make_directory, write_atomically, write_text_atomically
from las.progress import progress_bar, warn

SHARD_UTTERANCES = 512  # at most this many utterances per shard
Source = tuple[str, int, int, int, int]  # (absolute path, size, mtime, inode, ctime): see source_of
FileIdentity = tuple[int, int, int, int]  # a Source without its path: the same file under any name


@dataclass(frozen=True)
class Missing:
    """An utterance to extract: its cache key and where its audio is."""

    key: str
    file: Path  # its audio, or its precomputed features (`precomputed`)
    segment: Segment | None
    source: Source  # the file it was read from, as `source_of` identifies it
    digest: str  # sha256 of the file's bytes
    precomputed: bool = False  # `file` is a `.npy` of features, copied as they are (float32)


@dataclass(frozen=True)
class Entry:
    shard: str  # file name within the cache directory
    offset: int  # first frame in the shard
    frames: int
    dimension: int
    checksum: str  # of the entry's frames as stored


@dataclass(frozen=True)
class Extracted:
    """One utterance from a worker: its index record, and the features themselves when its shard
    could not be written (they then live in memory for this run); or why it has none."""

    record: dict[str, Any]
    features: np.ndarray | None = None
    error: str | None = None  # the utterance cannot be used (only when skipping bad ones)


def checksum(data: bytes | np.ndarray) -> str:
    return hashlib.blake2b(memoryview(data).cast("B"), digest_size=16).hexdigest()


def line_checksum(record: dict[str, Any]) -> str:
    """The checksum of an index line's fields (all but `check` itself)."""
    fields = {name: value for name, value in record.items() if name != "check"}
    return checksum(json.dumps(fields, sort_keys=True).encode())


class StoredFeatures(FeatureSet):
    """Features read on access: float32 `(frames, dim)` each, memory-mapped from a cache shard
    (an `Entry`) or held in memory (a tensor, when the cache could not be written).

    Only the requested frames are read, so a corpus far larger than memory trains from the page
    cache; each process (DataLoader workers included) maps a shard once.
    """

    def __init__(self, directory: Path, items: Sequence[Entry | torch.Tensor]) -> None:
        self.directory = directory
        self.items = list(items)
        self.shards: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> torch.Tensor:  # type: ignore[override]
        item = self.items[index]
        if isinstance(item, torch.Tensor):
            return item
        if item.shard not in self.shards:
            self.shards[item.shard] = np.load(self.directory / item.shard, mmap_mode="r", allow_pickle=False)
        frames = self.shards[item.shard][item.offset : item.offset + item.frames]
        return torch.from_numpy(frames.astype(np.float32))

    def frame_counts(self) -> list[int]:
        return [item.shape[0] if isinstance(item, torch.Tensor) else item.frames for item in self.items]

    def dimensions(self) -> set[int]:
        return {item.shape[1] if isinstance(item, torch.Tensor) else item.dimension for item in self.items}


class FeatureCache:
    def __init__(self, directory: str | Path, config: FeatureConfig, workers: int = 0) -> None:
        """The cache in `directory` (see `cache_directory`); `workers` processes compute misses (0:
        in this process)."""
        settings = json.dumps([FEATURE_VERSION, config.extraction()], sort_keys=True)
        self.directory = cache_directory(directory) / hashlib.sha256(settings.encode()).hexdigest()[:16]
        self.config = config
        self.workers = workers
        self.entries: dict[str, Entry] = {}  # by key
        self.records: dict[str, dict[str, Any]] = {}  # by key: the index line of each entry
        self.digests: dict[FileIdentity, str] = {}  # file (`source_of`, any path to it) -> digest of its bytes
        self.verified: set[str] = set()  # keys whose entries this process has checked
        self.memory: dict[str, torch.Tensor] = {}  # by key: features the cache could not store
        self.failed: dict[str, str] = {}  # by key: why an utterance has no features (when skipping)
        self.writable = True
        self.in_use = use(self.directory)  # so that `las cache prune` leaves this folder alone
        self.checked = CheckedShards(self.directory)
        self.read_index()

    @property
    def index_path(self) -> Path:
        return self.directory / "index.jsonl"

    def read_index(self) -> None:
        if not self.index_path.exists():
            return
        damaged = 0
        for line in self.index_path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
                if record.pop("check") != line_checksum(record):
                    raise ValueError
                self.remember(record)
            except (ValueError, KeyError, TypeError, AttributeError):  # cut short by a killed run, or damaged
                damaged += 1
        if damaged:
            warn(f"feature cache {self.index_path}: ignored {damaged} damaged index lines; they are recomputed")
            self.rewrite_index()

    def remember(self, record: dict[str, Any]) -> None:
        entry = Entry(record["shard"], record["offset"], record["frames"], record["dimension"], record["checksum"])
        self.entries[record["key"]] = entry
        self.records[record["key"]] = record
        self.digests[identity(record["source"])] = record["digest"]

    def load(self, utterances: Sequence[Utterance], description: str = "features", speed: float = 1.0) -> FeatureSet:
        """Every utterance's features: precomputed ones as they are, else log-mels (of the audio
        played `speed` times faster) from the cache, computing the misses first."""
        return self.load_at_speeds(utterances, description, [speed])[0]

    def load_at_speeds(
        self, utterances: Sequence[Utterance], description: str, speeds: Sequence[float]
    ) -> list[FeatureSet]:
        """`load` at each of `speeds`, each file looked at once (a stat, or a read if it is new)."""
        if all(utterance.features is not None for utterance in utterances):
            features = InMemoryFeatures([torch.from_numpy(utterance.features) for utterance in utterances])
            return [features for _ in speeds]
        digests = self.identify(utterances)
        loaded = []
        for speed in speeds:
            keys, missing = self.pending(utterances, speed, digests)
            if missing:
                label = description if speed == 1.0 else f"{description} x{speed:g}"
                self.extract(list(missing.values()), speed, label)
            loaded.append(StoredFeatures(self.directory, [self.memory.get(key, self.entries.get(key)) for key in keys]))
        return loaded

    def usable(
        self, utterances: Sequence[Utterance], source: str | Path, speeds: Sequence[float] = (1.0,)
    ) -> list[Utterance]:
        """The utterances whose features can be computed at every speed, computed and cached; the
        others are left out with one warning (data.bad_utterances=skip)."""
        if all(utterance.features is not None for utterance in utterances):
            return list(utterances)
        problems: dict[str, str] = {}  # by utterance id
        readable, digests = [], []
        for utterance in utterances:
            try:
                digests.append(self.digest(utterance, source_of(utterance)))
            except LasError as error:
                problems[utterance.id] = str(error)
                continue
            readable.append(utterance)
        for speed in speeds:
            keys, missing = self.pending(readable, speed, digests)
            if missing:
                self.extract(list(missing.values()), speed, f"{source} x{speed:g}", skip_bad=True)
            for utterance, key in zip(readable, keys, strict=True):
                if key in self.failed:
                    problems.setdefault(utterance.id, self.failed[key])
        report_skipped(source, list(problems.values()))
        return [utterance for utterance in utterances if utterance.id not in problems]

    def identify(self, utterances: Sequence[Utterance]) -> list[str]:
        """Each utterance's content digest: a stat per file (`source_of`), and a read only for
        files this cache has not seen."""
        return [self.digest(utterance, source_of(utterance)) for utterance in utterances]

    def pending(
        self, utterances: Sequence[Utterance], speed: float, digests: list[str]
    ) -> tuple[list[str], dict[str, Missing]]:
        """Each utterance's cache key at `speed`, and those not cached (or damaged) to compute."""
        keys = [
            cache_key(digest, utterance.segment, speed) for digest, utterance in zip(digests, utterances, strict=True)
        ]
        self.verify(keys)
        missing = {  # a second stat for these few: a tuple per utterance is 0.3 KB at a million
            key: Missing(key, utterance.file, utterance.segment, source_of(utterance), digest, utterance.audio is None)
            for key, utterance, digest in zip(keys, utterances, digests, strict=True)
            if key not in self.entries and key not in self.memory
        }
        return keys, missing

    def features(self, utterance: Utterance, speed: float = 1.0) -> torch.Tensor:
        """One utterance's features `(frames, dim)`."""
        return self.load([utterance], speed=speed)[0]

    def digest(self, utterance: Utterance, source: Source) -> str:
        file = identity(source)
        if file not in self.digests:
            self.digests[file] = content_digest(utterance)
        return self.digests[file]

    def verify(self, keys: Iterable[str]) -> None:
        """Check the cached entries of `keys` against their shards (once per process), reading only
        the shards that changed since their entries were last found intact (`CheckedShards`); drop
        the damaged entries, so that they are recomputed."""
        shards = {self.entries[key].shard for key in keys if key in self.entries and key not in self.verified}
        if not shards:
            return
        contents: dict[str, list[str]] = {shard: [] for shard in shards}  # shard -> keys of all its entries
        for key, entry in self.entries.items():
            if entry.shard in contents:
                contents[entry.shard].append(key)
        damaged = 0
        for shard, shard_keys in contents.items():
            if not self.checked.trusted(shard, (self.entries[key] for key in shard_keys)):
                mapped = map_shard(self.directory / shard)
                intact = [key for key in shard_keys if entry_is_intact(self.entries[key], mapped)]
                for key in set(shard_keys) - set(intact):
                    del self.entries[key], self.records[key]
                damaged += len(shard_keys) - len(intact)
                shard_keys = intact
                self.checked.remember(shard, (self.entries[key] for key in intact))
            self.verified.update(shard_keys)
        self.checked.save()
        if damaged:
            warn(f"feature cache {self.directory}: {damaged} damaged entries dropped; recomputing them")
            self.rewrite_index()

    def extract(self, missing: list[Missing], speed: float, description: str, skip_bad: bool = False) -> None:
        """Compute the missing utterances in chunks, one shard each, and index them; with
        `skip_bad`, an utterance that cannot be computed is recorded in `failed`, not an error."""
        if self.writable:
            try:
                make_directory(self.directory, "feature cache")
            except LasError as error:
                self.cannot_store(str(error))
        size = min(SHARD_UTTERANCES, math.ceil(len(missing) / max(1, self.workers)))
        chunks = [
            (self.directory if self.writable else None, self.config, speed, missing[start : start + size], skip_bad)
            for start in range(0, len(missing), size)
        ]
        bar = progress_bar(range(len(missing)), description, "utt")
        if self.workers > 0 and len(chunks) > 1:
            # fork: workers inherit the imported modules; one thread each, one core each.
            context = multiprocessing.get_context("fork")
            with context.Pool(min(self.workers, len(chunks)), initializer=torch.set_num_threads, initargs=(1,)) as pool:
                self.index(pool.imap_unordered(extract_chunk, chunks), bar)
        else:
            self.index(map(extract_chunk, chunks), bar)
        bar.close()
        self.checked.save()

    def index(self, results: Iterable[list[Extracted]], bar: tqdm) -> None:
        """Append each chunk's records to the index once its shard is in place; keep in memory
        what could not be stored."""
        for extracted in results:
            stored = [item.record for item in extracted if item.features is None and item.error is None]
            for item in extracted:
                if item.error is not None:
                    self.failed[item.record["key"]] = item.error
                elif item.features is not None:
                    self.cannot_store("a shard could not be written")
                    self.memory[item.record["key"]] = torch.from_numpy(item.features.astype(np.float32))
            if stored and self.writable:
                self.append_index(stored)
            for record in stored:
                self.remember(record)
                self.verified.add(record["key"])  # computed by this run
            if stored and self.writable:  # a chunk is one new shard, whole
                self.checked.remember(stored[0]["shard"], (self.entries[record["key"]] for record in stored))
            bar.update(len(extracted))

    def append_index(self, records: list[dict[str, Any]]) -> None:
        try:
            with open(self.index_path, "a") as file:
                file.write(index_lines(records))
                file.flush()
        except OSError as error:
            self.cannot_store(error.strerror or str(error))

    def rewrite_index(self) -> None:
        """The index with only the entries still trusted, so damage is reported and skipped once."""
        try:
            write_text_atomically(self.index_path, index_lines(self.records.values()))
        except LasError as error:
            self.cannot_store(str(error))

    def cannot_store(self, reason: str) -> None:
        if self.writable:
            warn(f"cannot write the feature cache in {self.directory} ({reason}): computing features in memory")
        self.writable = False


def index_lines(records: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps({**record, "check": line_checksum(record)}) + "\n" for record in records)


def content_digest(utterance: Utterance) -> str:
    """The sha256 of the bytes of the utterance's file: what its features and word times are of."""
    return hashlib.sha256(read_bytes(utterance.file, utterance.file_kind)).hexdigest()


def cache_key(digest: str, segment: Segment | None, speed: float) -> str:
    return f"{digest}@{speed:g}" + (f"[{segment}]" if segment else "")


def map_shard(path: Path) -> np.ndarray | None:
    """A shard memory-mapped, or None when it is missing or not a float16 or float32 matrix."""
    try:
        shard = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    return shard if shard.dtype in (np.float16, np.float32) and shard.ndim == 2 else None


def entry_is_intact(entry: Entry, shard: np.ndarray | None) -> bool:
    if shard is None or entry.dimension != shard.shape[1] or entry.frames < 1 or entry.offset < 0:
        return False
    if entry.offset + entry.frames > shard.shape[0]:
        return False
    return checksum(np.ascontiguousarray(shard[entry.offset : entry.offset + entry.frames])) == entry.checksum


def source_of(utterance: Utterance) -> Source:
    """What identifies an unchanged file without reading it: its size, mtime, inode and ctime (ns),
    after symbolic links; and its absolute path, for `las cache info`. A file replaced with its size
    and mtime kept (`cp -p`, `rsync -t`, `tar`) still has a new ctime, which no tool can set: the
    kernel stamps it at every change. The path is not resolved: at a million rows that alone took
    minutes, and the identity needs no path."""
    path = utterance.file
    try:
        status = os.stat(path)
    except OSError:
        read_bytes(path, utterance.file_kind)  # raises the one-line error for a missing or unreadable file
        raise
    name = str(path) if path.is_absolute() else os.path.abspath(path)
    return (name, status.st_size, status.st_mtime_ns, status.st_ino, status.st_ctime_ns)


def identity(source: Source | list) -> FileIdentity:
    """Which file a source is, whatever the path (a symbolic link, a moved tree): its size, mtime,
    inode and ctime. Nanosecond times make two files that agree on all four the same file. An
    index line of an older las has fewer fields: its entry stays, and its file is re-hashed once."""
    return tuple(source[1:])  # type: ignore[return-value]


def extract_features(item: Missing, extractor: FilterbankExtractor, speed: float) -> np.ndarray:
    """Log-mel features `(frames, mel_bins)` float16 of one utterance, played `speed` times
    faster; or its precomputed features `(frames, dim)` float32, exactly as its file holds them."""
    if item.precomputed:
        if speed != 1.0:
            raise LasError(f"{item.file}: precomputed features cannot be played at speed {speed:g}")
        return read_feature_file(item.file)
    rate = extractor.config.sample_rate
    waveform = change_speed(load_audio(item.file, rate, item.segment), speed, rate)
    return log_mel_features(extractor, waveform, describe(item.file, item.segment)).numpy().astype(np.float16)


def describe(audio: Path, segment: Segment | None) -> str:
    return f"{audio}" + (f" [{segment}]" if segment else "")


def extract_chunk(job: tuple[Path | None, FeatureConfig, float, list[Missing], bool]) -> list[Extracted]:
    """Features of a chunk of utterances -> one shard in `directory` (None: no shard, the
    features come back in memory); its index records. With `skip_bad`, an utterance that cannot be
    computed comes back as an error instead of stopping the chunk. A shard holds one dtype and
    one dimension: float16 log-mels, or float32 precomputed features (a chunk is one or the other)."""
    directory, config, speed, items, skip_bad = job
    extractor = FilterbankExtractor(config)
    arrays, records, failures, offset = [], [], [], 0
    name = f"shard-{uuid.uuid4().hex[:16]}.npy"
    for item in items:
        try:
            features = extract_features(item, extractor, speed)
            if arrays and features.shape[1] != arrays[0].shape[1]:
                raise LasError(f"{item.file}: features of dimension {features.shape[1]}, others {arrays[0].shape[1]}")
        except LasError as error:
            if not skip_bad:
                raise
            failures.append(Extracted({"key": item.key}, error=str(error)))
            continue
        arrays.append(features)
        records.append(
            dict(
                key=item.key,
                shard=name,
                offset=offset,
                frames=len(features),
                dimension=features.shape[1],
                checksum=checksum(features),
                source=list(item.source),
                digest=item.digest,
            )
        )
        offset += len(features)
    if directory is not None and arrays:
        try:
            write_atomically(directory / name, lambda file: np.save(file, np.concatenate(arrays)))
            return failures + [Extracted(record) for record in records]
        except LasError:
            pass  # read-only or full: the caller warns once and keeps these in memory
    return failures + [Extracted(record, features) for record, features in zip(records, arrays, strict=True)]
