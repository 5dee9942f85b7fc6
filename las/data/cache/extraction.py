"""One utterance's features: computed from its audio (or copied from its precomputed `.npy`),
written as shards, known by its content, and checked when read back. The feature cache
(las/data/cache/store.py) computes corpora of them ahead of training; las/data/cache/on_demand.py computes
rows as the batches read them.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from las.core.config import FeatureConfig
from las.core.errors import LasError
from las.core.files import write_atomically
from las.data.cache.index import Entry, FileIdentity, checksum
from las.data.corpora.arrays import array_shape
from las.data.corpora.manifest import read_feature_file
from las.data.corpora.utterances import Utterance
from las.data.front_end.audio import Segment, audio_length, load_audio, read_bytes
from las.data.front_end.declipping import clipped_share
from las.data.front_end.features import (
    FilterbankExtractor,
    analysed_features,
    analysis_sizes,
    check_analysable,
    frame_count,
    played_length,
)
from las.data.front_end.signal import resampled_length

Source = tuple[str, int, int, int, int]  # (absolute path, size, mtime, inode, ctime): see source_of


@dataclass(frozen=True)
class Missing:
    """An utterance to extract: its cache key and where its audio is."""

    key: str
    file: Path  # its audio, or its precomputed features (`precomputed`)
    segment: Segment | None
    precomputed: bool = False  # `file` is a `.npy` of features, copied as they are (float32)


@dataclass(frozen=True)
class Computed:
    """One utterance's features, and what its audio told of itself as recorded."""

    features: np.ndarray  # (frames, dim): float16 log-mels, or float32 precomputed features
    clipped: float = 0.0  # the share of its samples flat at full scale (`clipped_share`)
    speech: int | None = None  # 1 or 0: whether it holds speech as recorded (`Analysed.speech`)


@dataclass(frozen=True)
class Extracted:
    """One utterance from a worker: where its shard holds it, or the features themselves when its
    shard could not be written (they then live in memory for this run), or why it has none."""

    key: str
    entry: Entry | None = None
    computed: Computed | None = None
    error: str | None = None  # the utterance cannot be used (only when skipping bad ones)


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
    """`source_at` the utterance's file."""
    return source_at(utterance.location, utterance.file_kind)


def source_at(path: str | Path, kind: str) -> Source:
    """What identifies an unchanged file without reading it: its size, mtime, inode and ctime (ns),
    after symbolic links; and its absolute path, for `las cache info`. A file replaced with its size
    and mtime kept (`cp -p`, `rsync -t`, `tar`) still has a new ctime, which no tool can set: the
    kernel stamps it at every change. The path is not resolved: at a million rows that alone took
    minutes, and the identity needs no path."""
    try:
        status = os.stat(path)
    except OSError:
        read_bytes(Path(path), kind)  # raises the one-line error for a missing or unreadable file
        raise
    name = str(path) if os.path.isabs(path) else os.path.abspath(path)
    return (name, status.st_size, status.st_mtime_ns, status.st_ino, status.st_ctime_ns)


def identity(source: Source | list) -> FileIdentity:
    """Which file a source is, whatever the path (a symbolic link, a moved tree): its size, mtime,
    inode and ctime. Nanosecond times make two files that agree on all four the same file."""
    return tuple(source[1:])  # type: ignore[return-value]


def extract_features(
    item: Missing, extractor: FilterbankExtractor, speed: float, content: bytes | None = None
) -> Computed:
    """Log-mel features `(frames, mel_bins)` float16 of one utterance, played `speed` times
    faster, and its clipped share; or its precomputed features `(frames, dim)` float32, exactly as
    its file holds them. From `content` where given: the file's bytes, as read (and hashed) by the
    caller."""
    if item.precomputed:
        if speed != 1.0:
            raise LasError(f"{item.file}: precomputed features cannot be played at speed {speed:g}")
        return Computed(read_feature_file(item.file, content))
    waveform = load_audio(item.file, extractor.config.sample_rate, item.segment, content)
    features, speech = analysed_features(extractor, waveform, describe(item.file, item.segment), speed)
    held = None if speech is None else int(speech)
    return Computed(features.numpy().astype(np.float16), clipped_share(waveform), held)


def planned_frames(item: Missing, config: FeatureConfig, speeds: Sequence[float]) -> list[tuple[int, int]]:
    """(frames, dimension) of what `extract_features` will give `item` at each of `speeds`, from
    its file's header alone: the length buckets of rows whose features are not computed yet, the
    same as those of rows the cache holds, so that batches do not depend on what was cached."""
    if item.precomputed:
        shape = array_shape(item.file)
        if len(shape) != 2 or 0 in shape:
            raise LasError(f"{item.file}: expected a (frames, dim) array of features, got shape {shape}")
        if any(speed != 1.0 for speed in speeds):
            raise LasError(f"{item.file}: precomputed features cannot be played at another speed")
        return [(shape[0], shape[1]) for _ in speeds]
    samples, rate = audio_length(item.file, item.segment)
    target = config.sample_rate
    samples = resampled_length(samples, rate, target)
    window, hop = analysis_sizes(config)
    shapes = []
    for speed in speeds:  # as change_speed plays it
        played = played_length(samples, speed, target)
        if played < window:
            check_analysable(played, config, describe(item.file, item.segment))
        shapes.append((frame_count(played, window, hop), config.mel_bins))
    return shapes


def describe(audio: Path, segment: Segment | None) -> str:
    return f"{audio}" + (f" [{segment}]" if segment else "")


def extract_chunk(job: tuple[Path | None, FeatureConfig, float, list[Missing], bool]) -> list[Extracted]:
    """Features of a chunk of utterances -> one shard in `directory` (None: no shard, the
    features come back in memory), and where each lies in it. With `skip_bad`, an utterance that
    cannot be computed comes back as an error instead of stopping the chunk. A shard holds one dtype
    and one dimension: float16 log-mels, or float32 precomputed features (a chunk is one or the other)."""
    directory, config, speed, items, skip_bad = job
    extractor = FilterbankExtractor(config)
    computed, entries, failures, offset = [], [], [], 0
    name = f"shard-{uuid.uuid4().hex[:16]}.npy"
    for item in items:
        try:
            result = extract_features(item, extractor, speed)
            features = result.features
            if computed and features.shape[1] != computed[0].features.shape[1]:
                others = computed[0].features.shape[1]
                raise LasError(f"{item.file}: features of dimension {features.shape[1]}, others {others}")
        except LasError as error:
            if not skip_bad:
                raise
            failures.append(Extracted(item.key, error=str(error)))
            continue
        computed.append(result)
        entry = Entry(name, offset, len(features), features.shape[1], checksum(features), result.clipped, result.speech)
        entries.append((item.key, entry))
        offset += len(features)
    if directory is not None and computed:
        try:
            whole = np.concatenate([result.features for result in computed])
            write_atomically(directory / name, lambda file: np.save(file, whole))
            return failures + [Extracted(key, entry) for key, entry in entries]
        except LasError:
            pass  # read-only or full: the caller warns once and keeps these in memory
    return failures + [Extracted(key, computed=result) for (key, _), result in zip(entries, computed, strict=True)]
