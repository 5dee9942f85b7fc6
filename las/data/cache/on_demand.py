"""Features computed as the batches first read them: a corpus too large to extract before
training (a million recordings are hours of extraction on a few cores) starts at once, and the
cache fills as training reads it.

Start-up needs only each row's length, for the length buckets: read from its file's header in
the frames its features will have (`las.data.cache.extraction.planned_frames`), so that the batches
are the same whether a row was cached or not, and after a resume. A row is then computed in the
process that reads it (a DataLoader worker) from the bytes it has just hashed, so its key names
exactly the content its features are of, whatever happened to the file since start-up; a row
that another process cached meanwhile is served from there, checked. Each process gathers what
it computed into shards of its own, written and indexed as the ahead extraction's are
(`SHARD_UTTERANCES` at a time, and the rest when the process ends).
"""

from __future__ import annotations

import hashlib
import multiprocessing.util
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from las.core.config import FeatureConfig
from las.core.errors import LasError
from las.core.files import write_atomically
from las.core.progress import warn
from las.data.cache.checked_shards import CheckedShards
from las.data.cache.extraction import (
    Computed,
    Missing,
    cache_key,
    entry_is_intact,
    extract_features,
    identity,
    map_shard,
    source_at,
)
from las.data.cache.index import CacheIndex, Entry, FileIdentity, Unwritable, checksum
from las.data.front_end.audio import Segment, read_bytes
from las.data.front_end.features import FilterbankExtractor

SHARD_UTTERANCES = 512  # a process writes a shard of what it computed once it holds this many
SHARD_BYTES = 256 << 20  # ... or this many bytes of features, whichever comes first


class OnDemand:
    """The rows of one corpus at one speed, computed where they are read. Pickled into each
    DataLoader worker: a process's own state (index connection, unwritten features) is made
    anew in it."""

    def __init__(
        self,
        directory: Path | None,  # None: the cache cannot be written; rows are computed every time
        config: FeatureConfig,
        speed: float,
        files: Sequence[str],  # each row's audio, or its precomputed features
        segments: Mapping[int, Segment],  # by row, for the rows that are a part of their file
        precomputed: bool,
    ) -> None:
        self.directory, self.config, self.speed = directory, config, speed
        self.files, self.segments, self.precomputed = files, segments, precomputed
        self.kind = "feature file" if precomputed else "audio file"
        self.process: Writer | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "process": None}

    def features(self, row: int) -> torch.Tensor:
        """Row `row`'s features `(frames, dim)` float32: from the cache if it holds this content,
        else computed and kept for the next shard."""
        writer = self.writer()
        file, segment = Path(self.files[row]), self.segments.get(row)
        source = source_at(file, self.kind)  # before the read: a write after it changes the identity
        content = read_bytes(file, self.kind)
        digest = hashlib.sha256(content).hexdigest()
        key = cache_key(digest, segment, self.speed)
        cached = writer.cached(key)
        if cached is not None:
            return cached
        item = Missing(key, file, segment, self.precomputed)
        computed = extract_features(item, writer.extractor, self.speed, content)
        writer.keep(key, computed, (identity(source), digest, source[0]))
        return torch.from_numpy(computed.features.astype(np.float32))

    def writer(self) -> Writer:
        if self.process is None or self.process.pid != os.getpid():
            self.process = Writer(self.directory, self.config)
        return self.process


class Writer:
    """One process's share of the on-demand work: its index connection, and the features it
    computed, written as a shard once there are enough of them and when the process ends."""

    def __init__(self, directory: Path | None, config: FeatureConfig) -> None:
        self.pid = os.getpid()
        self.directory = directory
        self.index = CacheIndex(directory) if directory is not None else None
        self.extractor = FilterbankExtractor(config)
        self.computed: dict[str, Computed] = {}  # by key, in the order computed
        self.files: list[tuple[FileIdentity, str, str]] = []  # (identity, digest, path) of each
        self.shards: dict[str, np.ndarray | None] = {}
        # Run at the process's end: a DataLoader worker's when its epoch ends, or this one's.
        multiprocessing.util.Finalize(self, self.write, exitpriority=10)

    def cached(self, key: str) -> torch.Tensor | None:
        if key in self.computed:
            return torch.from_numpy(self.computed[key].features.astype(np.float32))
        if self.index is None:
            return None
        entry = self.index.entries([key]).get(key)
        if entry is None:
            return None
        if entry.shard not in self.shards:
            self.shards[entry.shard] = map_shard(self.index.directory / entry.shard)
        shard = self.shards[entry.shard]
        if not entry_is_intact(entry, shard):
            return None  # recomputed; the next shard's entry replaces it
        return torch.from_numpy(shard[entry.offset : entry.offset + entry.frames].astype(np.float32))

    def keep(self, key: str, computed: Computed, file: tuple[FileIdentity, str, str]) -> None:
        if self.index is None:
            return
        self.computed[key] = computed
        self.files.append(file)
        held = sum(item.features.nbytes for item in self.computed.values())
        if len(self.computed) >= SHARD_UTTERANCES or held >= SHARD_BYTES:
            self.write()

    def write(self) -> None:
        """What this process computed, as one shard per dtype and dimension, indexed; where the
        cache cannot be written, the rows are simply computed again when next read."""
        if self.index is None or not self.computed or self.pid != os.getpid():
            return
        groups: dict[tuple[str, int], list[str]] = {}
        for key, item in self.computed.items():
            groups.setdefault((item.features.dtype.str, item.features.shape[1]), []).append(key)
        checked = CheckedShards(self.index.directory)
        try:
            for keys in groups.values():
                name = f"shard-{uuid.uuid4().hex[:16]}.npy"
                computed = [self.computed[key] for key in keys]
                whole = np.concatenate([item.features for item in computed])
                write_atomically(self.index.directory / name, lambda file, whole=whole: np.save(file, whole))
                entries, offset = {}, 0
                for key, item in zip(keys, computed, strict=True):
                    array = item.features
                    entries[key] = Entry(
                        name, offset, len(array), array.shape[1], checksum(array), item.clipped, item.speech
                    )
                    offset += len(array)
                self.index.add(entries, self.files)
                self.files = []  # recorded with the first shard
                checked.remember(name, entries.values())
            checked.save()
        except (LasError, Unwritable) as error:
            warn(f"cannot write the feature cache in {self.index.directory} ({error}): computing features as read")
            self.index = None
        self.computed, self.files = {}, []
