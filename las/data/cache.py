"""The on-disk feature cache: float16 shards, memory-mapped for reading, and an index.

Layout under `<cache_dir>/<digest of the feature settings>/`:

    shard-<id>.npy  float16 `(frames, dim)`: the features of a chunk of utterances, end to end
    index.jsonl     one line per cached utterance: its key, shard, offset and frame count

An utterance's key is the sha256 of its audio bytes plus its speed factor, so a renamed or moved
file is still found and an edited one is recomputed. Each line also records the path, size and
modification time the key was computed from, so that a later run re-hashes only files that
changed. Misses are computed in worker processes, one shard per chunk; shards are written under a
temporary name and renamed before their index lines are appended, so a killed run leaves no entry
pointing at a half-written shard.
"""

from __future__ import annotations

import dataclasses
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
from las.data.audio import decode_audio, read_bytes
from las.data.features import FEATURE_VERSION, FeatureSet, FilterbankExtractor, InMemoryFeatures, change_speed
from las.data.manifest import Utterance
from las.progress import progress_bar

SHARD_UTTERANCES = 512  # at most this many utterances per shard


@dataclass(frozen=True)
class Missing:
    """An utterance to extract: its cache key and where its audio is."""

    key: str
    audio: Path
    source: tuple[str, int, int]  # (path, size, mtime) it was read from
    digest: str  # sha256 of the audio bytes


@dataclass(frozen=True)
class Entry:
    shard: str  # file name within the cache directory
    offset: int  # first frame in the shard
    frames: int
    dimension: int


class StoredFeatures(FeatureSet):
    """Features read from memory-mapped shards on access: float32 `(frames, dim)` each.

    Only the requested frames are read, so a corpus far larger than memory trains from the page
    cache; each process (DataLoader workers included) maps a shard once.
    """

    def __init__(self, directory: Path, entries: Sequence[Entry]) -> None:
        self.directory = directory
        self.entries = list(entries)
        self.shards: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int) -> torch.Tensor:  # type: ignore[override]
        entry = self.entries[index]
        if entry.shard not in self.shards:
            self.shards[entry.shard] = np.load(self.directory / entry.shard, mmap_mode="r")
        frames = self.shards[entry.shard][entry.offset : entry.offset + entry.frames]
        return torch.from_numpy(frames.astype(np.float32))

    def frame_counts(self) -> list[int]:
        return [entry.frames for entry in self.entries]

    def dimensions(self) -> set[int]:
        return {entry.dimension for entry in self.entries}


class FeatureCache:
    def __init__(self, directory: str | Path, config: FeatureConfig, workers: int = 0) -> None:
        """`workers` processes compute misses (0: in this process)."""
        settings = json.dumps([FEATURE_VERSION, dataclasses.asdict(config)], sort_keys=True)
        self.directory = Path(directory) / hashlib.sha256(settings.encode()).hexdigest()[:16]
        self.config = config
        self.workers = workers
        self.entries: dict[str, Entry] = {}  # by key
        self.digests: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> audio digest
        self.read_index()

    @property
    def index_path(self) -> Path:
        return self.directory / "index.jsonl"

    def read_index(self) -> None:
        if not self.index_path.exists():
            return
        for line in self.index_path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a killed run
                continue
            self.remember(record)

    def remember(self, record: dict[str, Any]) -> None:
        self.entries[record["key"]] = Entry(record["shard"], record["offset"], record["frames"], record["dimension"])
        self.digests[tuple(record["source"])] = record["digest"]

    def load(self, utterances: Sequence[Utterance], description: str = "features", speed: float = 1.0) -> FeatureSet:
        """Every utterance's features: precomputed ones as they are, else log-mels (of the audio
        played `speed` times faster) from the cache, computing the misses first."""
        if all(utterance.features is not None for utterance in utterances):
            return InMemoryFeatures([torch.from_numpy(utterance.features) for utterance in utterances])
        sources = [source_of(utterance.audio) for utterance in utterances]
        digests = [self.digest(utterance.audio, source) for utterance, source in zip(utterances, sources, strict=True)]
        keys = [f"{digest}@{speed:g}" for digest in digests]
        missing = {
            key: Missing(key, utterance.audio, source, digest)
            for key, utterance, source, digest in zip(keys, utterances, sources, digests, strict=True)
            if key not in self.entries
        }
        if missing:
            self.extract(list(missing.values()), speed, description)
        return StoredFeatures(self.directory, [self.entries[key] for key in keys])

    def features(self, utterance: Utterance, speed: float = 1.0) -> torch.Tensor:
        """One utterance's features `(frames, dim)`."""
        return self.load([utterance], speed=speed)[0]

    def digest(self, path: Path, source: tuple[str, int, int]) -> str:
        if source not in self.digests:
            self.digests[source] = hashlib.sha256(read_bytes(path)).hexdigest()
        return self.digests[source]

    def extract(self, missing: list[Missing], speed: float, description: str) -> None:
        """Compute the missing utterances in chunks, one shard each, and index them."""
        self.directory.mkdir(parents=True, exist_ok=True)
        size = min(SHARD_UTTERANCES, math.ceil(len(missing) / max(1, self.workers)))
        chunks = [
            (self.directory, self.config, speed, missing[start : start + size])
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

    def index(self, results: Iterable[list[dict[str, Any]]], bar: tqdm) -> None:
        """Append each chunk's records to the index once its shard is in place."""
        with open(self.index_path, "a") as file:
            for records in results:
                file.write("".join(json.dumps(record) + "\n" for record in records))
                file.flush()
                for record in records:
                    self.remember(record)
                bar.update(len(records))


def source_of(path: Path) -> tuple[str, int, int]:
    """What identifies an unchanged file without reading it: (absolute path, size, mtime in ns)."""
    try:
        status = path.stat()
    except OSError:
        read_bytes(path)  # raises the one-line error for a missing or unreadable file
        raise
    return (str(path.resolve()), status.st_size, status.st_mtime_ns)


def extract_chunk(job: tuple[Path, FeatureConfig, float, list[Missing]]) -> list[dict[str, Any]]:
    """Features of a chunk of utterances -> one float16 shard; its index records."""
    directory, config, speed, items = job
    extractor = FilterbankExtractor(config)
    arrays, records, offset = [], [], 0
    name = f"shard-{uuid.uuid4().hex[:16]}.npy"
    for item in items:
        waveform = decode_audio(read_bytes(item.audio), item.audio, config.sample_rate)
        features = extractor(change_speed(waveform, speed, config.sample_rate)).numpy()
        arrays.append(features.astype(np.float16))
        records.append(
            dict(
                key=item.key,
                shard=name,
                offset=offset,
                frames=len(features),
                dimension=features.shape[1],
                source=list(item.source),
                digest=item.digest,
            )
        )
        offset += len(features)
    temporary = directory / f"{name}.{os.getpid()}.tmp"
    with open(temporary, "wb") as file:
        np.save(file, np.concatenate(arrays))
    os.replace(temporary, directory / name)
    return records
