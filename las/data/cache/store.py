"""The on-disk feature cache: shards of features, memory-mapped for reading, and an index.

Layout under `<cache_dir>/<digest of the feature settings and the code that computes them>/`:

    shard-<id>.npy  `(frames, dim)`: the features of a chunk of utterances, end to end; float16
                    log-mels computed from audio, or precomputed features (HW4P2's per-utterance
                    `.npy` files) copied as they are, float32
    index.sqlite    which shard holds each cached utterance (key -> shard, offset, frame count,
                    checksum), and the content digest of each audio file seen
                    (las/data/cache/index.py): a run looks up its own rows, and reads no others

An utterance's key is the sha256 of its file's bytes plus its segment and speed factor, so a
renamed or moved file is still found and an edited one is recomputed. The index also knows each
file by its size, modification time, inode and change time, so that a later run re-hashes only
files that changed: the change time catches a file replaced with its size and modification time
kept (`cp -p`, `rsync -t`, `tar`), which no tool can set back.

The cache never serves features it cannot vouch for. Each index row carries a checksum of
itself, and each entry one of its frames; before a process first serves an entry it
checks the entry against its shard (shape, bounds, checksum), unless the shard and its entries
are unchanged since they were last found intact (las/data/cache/checked_shards.py): a run reads no
features to open a cache it has used before. Damaged rows and entries (a
truncated, overwritten or deleted shard, shifted offsets) are dropped and recomputed with a
warning. Shards are written under a temporary name, flushed and renamed before their index
rows are added, so a killed run leaves no entry pointing at a half-written shard; a cache that
cannot be written (read-only, disk full) degrades to features computed in memory for the run.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import multiprocessing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from tqdm import tqdm

from las.core.config import FeatureConfig
from las.core.errors import LasError
from las.core.files import make_directory
from las.core.progress import progress_bar, warn
from las.data.cache.checked_shards import CheckedShards
from las.data.cache.extraction import (
    Computed,
    Extracted,
    Missing,
    Source,
    cache_key,
    content_digest,
    entry_is_intact,
    extract_chunk,
    identity,
    map_shard,
    planned_frames,
    source_of,
)
from las.data.cache.index import CacheIndex, Entry, FileIdentity, Unwritable
from las.data.cache.on_demand import OnDemand
from las.data.cache.usage import cache_directory, use
from las.data.corpora.manifest import report_skipped
from las.data.corpora.utterances import Utterance, Utterances
from las.data.front_end.audio import Segment
from las.data.front_end.features import FeatureSet, InMemoryFeatures

SHARD_UTTERANCES = 512  # at most this many utterances per shard
FILES_PER_WRITE = 10_000  # files hashed by a run are recorded this many at a time
LOOKUP_ROWS = 50_000  # utterances whose features are looked up (and computed if missing) at a time
IN_MEMORY, PLANNED = -1, -2  # StoredFeatures rows that lie in no shard


def code_digest(paths: Iterable[str | Path], salt: str = "") -> str:
    """The sha256 of `salt` and the files at `paths`, in order."""
    digest = hashlib.sha256(salt.encode())
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


# What an entry holds is decided by the feature settings and by the code of the modules that read
# the audio, compute the features and store them: a cache folder per digest of both, so that
# features computed by other code (an earlier release, an experiment's edit) are never read as
# this code's. A version number bumped by hand let an experiment's features be read as a later
# change's once. An upgrade that edits these modules recomputes the features: about 45 CPU
# minutes per 1,000 hours of audio (`benchmark.py augmentation`: reading and log-mels). torch's
# release counts too: its FFT computes the spectrum, and another release may round it otherwise.
FEATURE_MODULES = (  # of las.data
    "front_end.audio cache.index front_end.declipping front_end.dereverberation cache.extraction front_end.features "
    "front_end.loudness front_end.runs front_end.segmentation front_end.signal"
)
DATA = Path(__file__).resolve().parent.parent  # las/data
FEATURE_CODE = code_digest(
    [__file__, *(DATA.joinpath(*name.split(".")).with_suffix(".py") for name in FEATURE_MODULES.split())],
    torch.__version__,
)


class Planned(NamedTuple):
    """A row whose features are computed when first read (`OnDemand`), and their shape."""

    row: int  # in the corpus
    frames: int
    dimension: int


class StoredFeatures(FeatureSet):
    """Features read on access: float32 `(frames, dim)` each, memory-mapped from a cache shard
    (an `Entry`), held in memory (`Computed`, when the cache could not be written), or computed
    when first read (`Planned`, by `on_demand`); and the share of each recording clipped at full
    scale (0 for those not computed yet).

    Only the requested frames are read, so a corpus far larger than memory trains from the page
    cache; each process (DataLoader workers included) maps a shard once. Where each utterance lies
    is held as columns of numbers (16 bytes an utterance), not an object each: at a million
    utterances, objects would be a quarter of a gigabyte in every process.
    """

    def __init__(
        self, directory: Path, items: Sequence[Entry | Computed | Planned], on_demand: OnDemand | None = None
    ) -> None:
        self.directory = directory
        self.on_demand = on_demand
        numbers: dict[str, int] = {}
        self.memory = {
            index: torch.from_numpy(item.features.astype(np.float32))
            for index, item in enumerate(items)
            if isinstance(item, Computed)
        }
        shares = (0.0 if isinstance(item, Planned) else item.clipped for item in items)
        self.clipped = np.fromiter(shares, dtype=np.float32, count=len(items))
        said = (-1 if isinstance(item, Planned) or item.speech is None else item.speech for item in items)
        self.speech = np.fromiter(said, dtype=np.int8, count=len(items))  # -1: not read
        rows = (
            (IN_MEMORY, 0, *item.features.shape)
            if isinstance(item, Computed)
            else (PLANNED, *item)
            if isinstance(item, Planned)
            else (numbers.setdefault(item.shard, len(numbers)), item.offset, item.frames, item.dimension)
            for item in items
        )  # streamed into the array: a list of a million tuples first was another 100 MB
        values = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=4 * len(items))
        # shard number (or IN_MEMORY, or PLANNED), offset in it (a planned one's row), frames, dimension
        self.location = values.reshape(-1, 4)
        self.shard_names = list(numbers)
        self.shards: dict[int, np.ndarray] = {}

    @classmethod
    def joined(cls, parts: Sequence[StoredFeatures]) -> StoredFeatures:
        """The utterances of `parts` (of one directory) in their order, as one set."""
        if len(parts) == 1:
            return parts[0]
        whole = cls(parts[0].directory, [], parts[0].on_demand)
        numbers: dict[str, int] = {}
        locations, offset = [], 0
        for part in parts:
            renumbered = np.array([numbers.setdefault(name, len(numbers)) for name in part.shard_names], np.int32)
            location = part.location.copy()
            stored = location[:, 0] >= 0
            location[stored, 0] = renumbered[location[stored, 0]]
            locations.append(location)
            whole.memory.update({offset + index: item for index, item in part.memory.items()})
            offset += len(part)
        whole.location, whole.shard_names = np.concatenate(locations), list(numbers)
        whole.clipped = np.concatenate([part.clipped for part in parts])
        whole.speech = np.concatenate([part.speech for part in parts])
        return whole

    def __len__(self) -> int:
        return len(self.location)

    def __getitem__(self, index: int) -> torch.Tensor:  # type: ignore[override]
        if index in self.memory:
            return self.memory[index]
        shard, offset, frames, _ = self.location[index].tolist()
        if shard == PLANNED:
            return self.on_demand.features(offset)  # type: ignore[union-attr]
        if shard not in self.shards:
            path = self.directory / self.shard_names[shard]
            self.shards[shard] = np.load(path, mmap_mode="r", allow_pickle=False)
        return torch.from_numpy(self.shards[shard][offset : offset + frames].astype(np.float32))

    def frame_counts(self) -> list[int]:
        return self.location[:, 2].tolist()

    def dimensions(self) -> set[int]:
        return set(np.unique(self.location[:, 3]).tolist())

    def clipped_shares(self) -> list[float]:
        return self.clipped.tolist()

    def speech_as_recorded(self) -> list[bool | None]:
        return [None if value < 0 else bool(value) for value in self.speech.tolist()]


class FeatureCache:
    def __init__(
        self, directory: str | Path, config: FeatureConfig, workers: int = 0, ahead_limit: float = math.inf
    ) -> None:
        """The cache in `directory` (see `cache_directory`); `workers` processes compute misses (0:
        in this process) before they are needed, for corpora of up to `ahead_limit` utterances
        x speeds; larger ones are computed as they are first read."""
        settings = json.dumps([FEATURE_CODE, config.extraction()], sort_keys=True)
        self.directory = cache_directory(directory) / hashlib.sha256(settings.encode()).hexdigest()[:16]
        self.config = config
        self.workers = workers
        self.ahead_limit = ahead_limit
        self.planned: dict[tuple[str, Segment | None, tuple[float, ...]], list[tuple[int, int]]] = {}
        self.index = CacheIndex(self.directory)  # opened on first lookup
        self.hashed: dict[FileIdentity, tuple[str, str]] = {}  # files hashed by this run, not yet indexed
        self.looked_up: dict[FileIdentity, str] = {}  # files found lately: many rows may link to one
        self.verified: set[str] = set()  # shards this process has checked, or written
        self.memory: dict[str, Computed] = {}  # by key: features the cache could not store
        self.failed: dict[str, str] = {}  # by key: why an utterance has no features (when skipping)
        self.writable = True
        self.in_use = use(self.directory)  # so that `las cache prune` leaves this folder alone
        self.checked = CheckedShards(self.directory)

    def load(self, utterances: Sequence[Utterance], description: str = "features", speed: float = 1.0) -> FeatureSet:
        """Every utterance's features: precomputed ones as they are, else log-mels (of the audio
        played `speed` times faster) from the cache, computing the misses first (always: only a
        training corpus is worth starting before its features are computed)."""
        return self.load_at_speeds(utterances, description, [speed], on_demand=False)[0]

    def load_at_speeds(
        self,
        utterances: Sequence[Utterance],
        description: str,
        speeds: Sequence[float],
        ahead: Sequence[int] = (),
        on_demand: bool = True,
    ) -> list[FeatureSet]:
        """`load` at each of `speeds`, each file looked at once (a stat, or a read if it is new).
        With `on_demand`, a corpus of more than `ahead_limit` utterances x speeds computes its
        missing features as they are first read (`OnDemand`) instead, except those of the rows
        `ahead` at the first speed, computed now (the normaliser's sample)."""
        if all(utterance.features is not None for utterance in utterances):
            features = InMemoryFeatures([torch.from_numpy(utterance.features) for utterance in utterances])
            return [features for _ in speeds]
        if not on_demand or len(utterances) * len(speeds) <= self.ahead_limit:
            return self.collect(utterances, description, speeds)
        if ahead:
            self.collect([utterances[index] for index in ahead], f"{description} (a sample, ahead)", speeds[:1])
        return self.collect(utterances, description, speeds, planned=True)

    def collect(
        self, utterances: Sequence[Utterance], description: str, speeds: Sequence[float], planned: bool = False
    ) -> list[StoredFeatures]:
        """Each utterance's features at each speed: cached, or computed now (or, `planned`, when
        first read)."""
        as_read = [self.as_read(utterances, speed) for speed in speeds] if planned else []
        parts: list[list[StoredFeatures]] = [[] for _ in speeds]
        # In chunks: a key, an index row and an entry per utterance of the whole corpus at once
        # were the largest part of a million-row start-up's peak memory.
        remaining = iter(utterances)
        for start in range(0, len(utterances), LOOKUP_ROWS):
            end = min(start + LOOKUP_ROWS, len(utterances))
            # A chunk's rows made once, and read at every speed (a corpus of columns makes an
            # `Utterance` per row read: building them per pass cost a third of the collection).
            chunk = list(itertools.islice(remaining, end - start))
            digests = self.identify(chunk, read=not planned)
            shapes: dict[int, list[tuple[int, int]]] = {}  # by row in the chunk: at each speed
            for number, speed in enumerate(speeds):
                keys, found, missing = self.pending(chunk, speed, digests)
                if missing and not planned:
                    label = description if speed == 1.0 else f"{description} x{speed:g}"
                    rows = f" (rows {start + 1}-{end} of {len(utterances)})" if len(utterances) > LOOKUP_ROWS else ""
                    found |= self.extract(list(missing.values()), speed, label + rows)
                items: list[Entry | Computed | Planned] = []
                for row, key in enumerate(keys):
                    if key in self.memory:
                        items.append(self.memory[key])
                    elif key in found:
                        items.append(found[key])
                    else:
                        if row not in shapes:
                            shapes[row] = self.planned_shapes(chunk[row], speeds)
                        items.append(Planned(start + row, *shapes[row][number]))
                parts[number].append(StoredFeatures(self.directory, items, as_read[number] if planned else None))
        return [StoredFeatures.joined(speed_parts) for speed_parts in parts]

    def as_read(self, utterances: Sequence[Utterance], speed: float) -> OnDemand:
        """What computes the utterances' features at `speed` where they are first read."""
        if self.writable:
            try:
                make_directory(self.directory, "feature cache")
            except LasError as error:
                self.cannot_store(str(error))
        columns = Utterances.of(utterances)  # shared by every speed, never a string per row
        precomputed = not all(columns.is_audio)
        directory = self.directory if self.writable else None
        return OnDemand(directory, self.config, speed, columns.locations, columns.segments, precomputed)  # type: ignore[arg-type]

    def planned_shapes(self, utterance: Utterance, speeds: Sequence[float]) -> list[tuple[int, int]]:
        """(frames, dimension) of the utterance's features at each speed, from its file's header;
        a file many rows link to is read once."""
        known = (utterance.location, utterance.segment, tuple(speeds))
        if known not in self.planned:
            if len(self.planned) >= FILES_PER_WRITE:
                self.planned.clear()
            item = Missing("", utterance.file, utterance.segment, utterance.audio_location is None)
            self.planned[known] = planned_frames(item, self.config, speeds)
        return self.planned[known]

    def usable(
        self, utterances: Sequence[Utterance], source: str | Path, speeds: Sequence[float] = (1.0,)
    ) -> Sequence[Utterance]:
        """The utterances whose features can be computed at every speed, computed and cached; the
        others are left out with one warning (data.bad_utterances=skip)."""
        if all(utterance.features is not None for utterance in utterances):
            return utterances
        problems: dict[str, str] = {}  # by utterance id
        readable, digests = [], []
        for utterance in utterances:
            try:
                digests.append(self.digest(utterance, source_of(utterance)))
            except LasError as error:
                problems[utterance.id] = str(error)
                continue
            readable.append(utterance)
        self.record_files()
        for speed in speeds:
            keys, _, missing = self.pending(readable, speed, digests)
            if missing:
                self.extract(list(missing.values()), speed, f"{source} x{speed:g}", skip_bad=True)
            for utterance, key in zip(readable, keys, strict=True):
                if key in self.failed:
                    problems.setdefault(utterance.id, self.failed[key])
        report_skipped(source, list(problems.values()))
        return (
            Utterances(utterance for utterance in utterances if utterance.id not in problems)
            if problems
            else utterances
        )

    def identify(self, utterances: Sequence[Utterance], read: bool = True) -> list[str | None]:
        """Each utterance's content digest: a stat per file (`source_of`) and a lookup, and a read
        only for files this cache has not seen (None for those, without `read`)."""
        sources = [source_of(utterance) for utterance in utterances]
        files = [identity(source) for source in sources]
        found = self.index.digests(file for file in files if file not in self.hashed and file not in self.looked_up)
        digests = [
            self.digest(utterance, source, read, found) for utterance, source in zip(utterances, sources, strict=True)
        ]
        self.record_files()
        return digests

    def digest(
        self, utterance: Utterance, source: Source, read: bool = True, found: dict[FileIdentity, str] | None = None
    ) -> str | None:
        """The utterance's content digest (see `identify`); `found`: digests looked up already."""
        file = identity(source)
        if file in self.hashed:
            return self.hashed[file][0]
        known = self.looked_up.get(file) or (found.get(file) if found is not None else self.index.digest(file))
        if known is not None:
            if len(self.looked_up) >= FILES_PER_WRITE:  # bounded: a million rows may be a million files
                self.looked_up.clear()
            self.looked_up[file] = known
        elif read:
            known = content_digest(utterance)
            self.hashed[file] = (known, source[0])
            if len(self.hashed) >= FILES_PER_WRITE:
                self.record_files()
        return known

    def record_files(self) -> None:
        """Put the files this run hashed in the index (kept in memory if it cannot be written)."""
        if not self.hashed or not self.writable:
            return
        try:
            self.index.add({}, [(file, digest, path) for file, (digest, path) in self.hashed.items()])
        except Unwritable as error:
            self.cannot_store(str(error))
            return
        self.hashed.clear()

    def pending(
        self, utterances: Sequence[Utterance], speed: float, digests: Sequence[str | None]
    ) -> tuple[list[str | None], dict[str, Entry], dict[str, Missing]]:
        """Each utterance's cache key at `speed` (None where its file's digest is not known), the
        intact entries of those cached, and those not cached (or damaged) to compute."""
        keys = [
            None if digest is None else cache_key(digest, utterance.segment, speed)
            for digest, utterance in zip(digests, utterances, strict=True)
        ]
        found = self.verify(self.index.entries(key for key in keys if key is not None and key not in self.memory))
        if self.index.damaged:
            warn(f"feature cache {self.index.path}: {self.index.damaged} damaged index rows dropped; recomputing them")
            self.index.damaged = 0
        missing = {
            key: Missing(key, utterance.file, utterance.segment, utterance.audio_location is None)
            for key, utterance in zip(keys, utterances, strict=True)
            if key is not None and key not in found and key not in self.memory
        }
        return keys, found, missing

    def features(self, utterance: Utterance, speed: float = 1.0) -> torch.Tensor:
        """One utterance's features `(frames, dim)`."""
        return self.load([utterance], speed=speed)[0]

    def verify(self, found: dict[str, Entry]) -> dict[str, Entry]:
        """`found` without its damaged entries: each shard checked once per process, and read only
        if it or its entries changed since they were last found intact (`CheckedShards`). The
        damaged entries leave the index, so that they are recomputed."""
        damaged = 0
        for shard in {entry.shard for entry in found.values()} - self.verified:
            entries = self.index.shard_entries(shard)
            if not self.checked.trusted(shard, entries.values()):
                mapped = map_shard(self.directory / shard)
                bad = [key for key, entry in entries.items() if not entry_is_intact(entry, mapped)]
                for key in bad:
                    del entries[key]
                    found.pop(key, None)
                damaged += len(bad)
                self.drop(bad)
                self.checked.remember(shard, entries.values())
            self.verified.add(shard)
        self.checked.save()
        if damaged:
            warn(f"feature cache {self.directory}: {damaged} damaged entries dropped; recomputing them")
        return found

    def drop(self, keys: list[str]) -> None:
        if keys and self.writable:
            try:
                self.index.drop(keys)
            except Unwritable as error:
                self.cannot_store(str(error))

    def extract(
        self, missing: list[Missing], speed: float, description: str, skip_bad: bool = False
    ) -> dict[str, Entry]:
        """Compute the missing utterances in chunks, one shard each, and index them; with
        `skip_bad`, an utterance that cannot be computed is recorded in `failed`, not an error.
        Returns the entries of those stored."""
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
                stored = self.store(pool.imap_unordered(extract_chunk, chunks), bar)
        else:
            stored = self.store(map(extract_chunk, chunks), bar)
        bar.close()
        self.checked.save()
        return stored

    def store(self, results: Iterable[list[Extracted]], bar: tqdm) -> dict[str, Entry]:
        """Index each chunk's entries once its shard is in place; keep in memory what could not
        be stored. Returns the entries stored."""
        everything: dict[str, Entry] = {}
        for extracted in results:
            stored = {item.key: item.entry for item in extracted if item.entry is not None}
            for item in extracted:
                if item.error is not None:
                    self.failed[item.key] = item.error
                elif item.computed is not None:
                    self.cannot_store("a shard could not be written")
                    self.memory[item.key] = item.computed
            if stored:
                shard = next(iter(stored.values())).shard  # a chunk is one new shard, whole
                if self.writable:
                    try:
                        self.index.add(stored, [])
                        self.checked.remember(shard, stored.values())
                    except Unwritable as error:
                        self.cannot_store(str(error))  # the shard serves this run, unindexed
                self.verified.add(shard)  # computed by this run
                everything |= stored
            bar.update(len(extracted))
        return everything

    def cannot_store(self, reason: str) -> None:
        if self.writable:
            warn(f"cannot write the feature cache in {self.directory} ({reason}): computing features in memory")
        self.writable = False
