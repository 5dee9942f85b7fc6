"""Which feature-cache shards were checked and are unchanged since, so that opening a cache reads
only the shards it has not seen: at 1,000 hours, checking every entry's checksum is a pass over
about 57 GB of features at the start of every run.

`checked.json`, beside the index, holds for each shard the file as it was when its entries were
last found intact (size, mtime, inode and ctime, as `las.data.cache.extraction.identity` knows audio files)
and a digest of those entries (offset, frames, dimension, checksum). A shard whose file and
entries are both as recorded needs no reading: any write to a file stamps a new ctime, which no
tool can set back, and an edited index row changes the entries' digest. What a stat cannot see,
bits flipped by failing storage under an unchanged file, is out of its reach; the entries'
checksums are read again whenever the shard is written to or its entries change.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from las.core.errors import LasError
from las.core.files import write_text_atomically

FILE_NAME = "checked.json"


class CheckedShards:
    """The record of checked shards in one cache folder; only a memo: lost or damaged, shards are
    simply checked again."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.shards: dict[str, dict[str, Any]] = read(directory / FILE_NAME)
        self.changed: set[str] = set()  # shards this process recorded

    def trusted(self, shard: str, entries: Iterable[Any]) -> bool:
        """Whether `shard`, with these index entries, is as it was when they were found intact."""
        known = self.shards.get(shard)
        return known is not None and known == self.state(shard, entries)

    def remember(self, shard: str, entries: Iterable[Any]) -> None:
        """`entries` of `shard` were found intact (or written) just now."""
        state = self.state(shard, entries)
        if state is not None:
            self.shards[shard] = state
            self.changed.add(shard)

    def forget(self, shard: str) -> None:
        self.shards.pop(shard, None)
        self.changed.add(shard)

    def save(self) -> None:
        """Merge what this process recorded into the file (other processes may have written it
        meanwhile); a cache that cannot be written just checks again next time."""
        if not self.changed:
            return
        merged = read(self.directory / FILE_NAME)
        for shard in self.changed:
            if shard in self.shards:
                merged[shard] = self.shards[shard]
            else:
                merged.pop(shard, None)
        try:
            write_text_atomically(self.directory / FILE_NAME, json.dumps(merged, sort_keys=True))
        except LasError:
            return
        self.changed.clear()

    def state(self, shard: str, entries: Iterable[Any]) -> dict[str, Any] | None:
        """The shard's file and entries as they are now; None if the file cannot be seen."""
        try:
            status = os.stat(self.directory / shard)
        except OSError:
            return None
        listed = sorted((entry.offset, entry.frames, entry.dimension, entry.checksum) for entry in entries)
        digest = hashlib.blake2b(json.dumps(listed).encode(), digest_size=16).hexdigest()
        return {"file": [status.st_size, status.st_mtime_ns, status.st_ino, status.st_ctime_ns], "entries": digest}


def read(path: Path) -> dict[str, dict[str, Any]]:
    try:
        shards = json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or cut short: check everything again
        return {}
    return shards if isinstance(shards, dict) else {}
