"""The feature cache's index, in SQLite: which shard holds each cached utterance, and which content
each audio file had. A run looks up the rows it needs and reads no others.

The index was a JSON-lines file read whole by every process: at a million cached utterances that
is about 80 s and 4-5 GB before the first step, whatever the run needs. SQLite (Python's standard
library) answers a run's lookups by key, and several processes share it: writes are one short
transaction per shard, and a writer waits for another (a busy timeout) rather than failing.
Two tables:

    files    (size, mtime, inode, ctime) -> digest of the file's bytes, and its path (`las cache
             info`): the identity `las.data.cache.extraction.identity` gives a file without reading it
    entries  key -> shard, offset, frames, dimension, checksum of the entry's frames, and the
             share of the recording's samples clipped at full scale (told at decoding), and
             whether it holds speech as recorded (1, 0, or NULL where that was not read)

Each row carries a checksum of its fields, as each index line did: a row changed by anything but
las is dropped (its file hashed again, its features computed again). A file that is not an index
(damaged storage, another program's), or one found damaged anywhere in it when a query or a write
reaches the damage (a torn write, a bad sector: SQLite reads a page only when it needs it), is set
aside with a warning and the cache starts anew: its features are computed again. An
index of an older las (`index.jsonl`) is imported once, its lines checked as before. The cache
folder must be on a local disk or one with working POSIX locks (as SQLite's own rule is).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np

from las.core.progress import warn

FILE_NAME = "index.sqlite"
LEGACY_FILE_NAME = "index.jsonl"
BUSY_SECONDS = 600.0  # another process writing (extracting a shard of 512 utterances) is waited for
LOOKUPS = 500  # keys per query: under SQLite's limit on bound parameters

Result = TypeVar("Result")
FileIdentity = tuple[int, int, int, int]  # (size, mtime, inode, ctime): see las.data.cache.extraction.identity

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    size INTEGER NOT NULL, mtime INTEGER NOT NULL, inode INTEGER NOT NULL, ctime INTEGER NOT NULL,
    digest TEXT NOT NULL, path TEXT NOT NULL, check_sum TEXT NOT NULL,
    PRIMARY KEY (size, mtime, inode, ctime)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY, shard TEXT NOT NULL, offset INTEGER NOT NULL, frames INTEGER NOT NULL,
    dimension INTEGER NOT NULL, checksum TEXT NOT NULL, clipped REAL NOT NULL, speech INTEGER,
    check_sum TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_by_shard ON entries (shard);
"""


class Entry(NamedTuple):
    shard: str  # file name within the cache directory
    offset: int  # first frame in the shard
    frames: int
    dimension: int
    checksum: str  # of the entry's frames as stored
    clipped: float = 0.0  # share of the recording's samples flat at full scale (las.data.front_end.declipping)
    speech: int | None = None  # 1 or 0: the no-speech rule on it as recorded (las.data.front_end.features.Analysed)


class Unwritable(Exception):
    """The index cannot be written (a read-only folder, a full disk)."""


class CacheIndex:
    """The index of one cache folder, opened on first use."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.connection: sqlite3.Connection | None = None
        self.inode: int | None = None  # of the file opened, to tell it from one another process made since
        self.damaged = 0  # rows dropped because their checksum did not match

    @property
    def path(self) -> Path:
        return self.directory / FILE_NAME

    def connect(self) -> sqlite3.Connection:
        if self.connection is None:
            try:
                self.connection = self.opened()
            except sqlite3.DatabaseError as error:  # not an index: set it aside, start anew
                self.set_aside(error)
        return self.connection

    def set_aside(self, error: sqlite3.DatabaseError) -> None:
        """Move a damaged index (and its journal) aside as `index.damaged`, and open a new one; an
        index that cannot be moved (a read-only folder) is replaced by an empty one in memory."""
        warn(f"feature cache {self.path}: not a readable index ({error}); set aside, features recomputed")
        opened_inode = self.inode
        self.close()
        with contextlib.suppress(OSError):
            # Another process may have set it aside already, and started the index now there.
            if opened_inode is None or os.stat(self.path).st_ino == opened_inode:
                os.replace(self.path, self.path.with_suffix(".damaged"))
                for suffix in ("-journal", "-wal", "-shm"):
                    self.path.with_name(FILE_NAME + suffix).unlink(missing_ok=True)
        try:
            self.connection = self.opened()
        except sqlite3.DatabaseError:
            self.connection = in_memory()

    def recovering(self, work: Callable[[], Result]) -> Result:
        """`work()`, done again on a new index where it finds this one damaged."""
        try:
            return work()
        except sqlite3.DatabaseError as error:
            if not is_damage(error):
                raise
            self.set_aside(error)
            return work()

    def opened(self) -> sqlite3.Connection:
        """The index, created if needed; read-only where it cannot be written, or an empty one in
        memory where there is none to read (the cache then stores nothing)."""
        legacy = self.directory / LEGACY_FILE_NAME
        try:
            connection = sqlite3.connect(self.path, timeout=BUSY_SECONDS, isolation_level=None)
            connection.executescript(SCHEMA)
        except sqlite3.OperationalError:  # a read-only folder, or no folder at all
            if self.path.exists() and not legacy.exists():
                connection = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=ro", uri=True, isolation_level=None)
            else:
                connection = in_memory()
        connection.execute("SELECT 1 FROM entries LIMIT 1").fetchone()  # a file damaged at its start fails here
        with contextlib.suppress(OSError):
            self.inode = os.stat(self.path).st_ino
        if legacy.exists():
            import_legacy(connection, legacy)
        return connection

    def digest(self, file: FileIdentity) -> str | None:
        """The digest recorded for this file, if its row is intact."""
        return self.digests([file]).get(file)

    def digests(self, files: Iterable[FileIdentity]) -> dict[FileIdentity, str]:
        """The digests recorded for those of `files` the index knows, with intact rows: a query per
        LOOKUPS // 4 files, not one each (a million files' start-up)."""
        found: dict[FileIdentity, str] = {}
        unique = list(dict.fromkeys(files))
        per_query = LOOKUPS // 4
        for start in range(0, len(unique), per_query):
            chunk = unique[start : start + per_query]
            rows = ",".join(["(?,?,?,?)"] * len(chunk))
            query = (  # a join, so that each probe uses the primary key (IN (VALUES ...) scans the table)
                f"WITH probe(size, mtime, inode, ctime) AS (VALUES {rows}) "
                "SELECT files.* FROM probe CROSS JOIN files WHERE files.size = probe.size AND "
                "files.mtime = probe.mtime AND files.inode = probe.inode AND files.ctime = probe.ctime"
            )
            parameters = [number for identity in chunk for number in identity]
            for *identity, digest, path, check in self.rows(query, parameters):
                if check != row_checksum([*identity, digest, path]):
                    self.damaged += 1
                    continue
                found[tuple(identity)] = digest  # type: ignore[index]
        return found

    def entries(self, keys: Iterable[str]) -> dict[str, Entry]:
        """The intact entries of `keys` (those the index has)."""
        found: dict[str, Entry] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), LOOKUPS):
            chunk = unique[start : start + LOOKUPS]
            marks = ",".join("?" * len(chunk))
            found |= self.intact(f"SELECT * FROM entries WHERE key IN ({marks})", chunk)
        return found

    def shard_entries(self, shard: str) -> dict[str, Entry]:
        """Every intact entry of `shard`, by key."""
        return self.intact("SELECT * FROM entries WHERE shard=?", [shard])

    def intact(self, query: str, parameters: Sequence[Any]) -> dict[str, Entry]:
        found, damaged = {}, []
        for key, *fields, check in self.rows(query, parameters):
            if check != row_checksum([key, *fields]):
                damaged.append(key)
                continue
            found[key] = Entry(*fields)
        if damaged:
            self.damaged += len(damaged)
            with contextlib.suppress(Unwritable):
                self.drop(damaged)
        return found

    def rows(self, query: str, parameters: Sequence[Any]) -> list[tuple]:
        """The rows `query` selects (a lookup's few hundred, fetched whole)."""
        return self.recovering(lambda: self.connect().execute(query, parameters).fetchall())

    def add(self, entries: dict[str, Entry], files: Iterable[tuple[FileIdentity, str, str]]) -> None:
        """Record `entries` (key -> Entry) and `files` ((identity, digest, path)) in one transaction."""
        entry_rows = [[key, *entry] for key, entry in entries.items()]
        file_rows = [[*file, digest, path] for file, digest, path in files]

        def write() -> None:
            with self.transaction() as connection:
                write_rows(connection, entry_rows, file_rows)

        self.recovering(write)

    def drop(self, keys: Iterable[str]) -> None:
        rows = [[key] for key in keys]

        def delete() -> None:
            with self.transaction() as connection:
                connection.executemany("DELETE FROM entries WHERE key=?", rows)

        self.recovering(delete)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        connection = self.connect()
        try:
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            raise unwritable(error) from None
        try:
            yield connection
            connection.execute("COMMIT")
        except sqlite3.OperationalError as error:
            rolled_back(connection)
            raise unwritable(error) from None
        except BaseException:
            rolled_back(connection)
            raise

    def summary(self) -> tuple[int, set[str], dict[str, int]]:
        """For `las cache info`: the entry count, the shards named, and entries per source folder."""
        return self.recovering(self.counted)

    def counted(self) -> tuple[int, set[str], dict[str, int]]:
        connection = self.connect()
        count = connection.execute("SELECT count(*) FROM entries").fetchone()[0]
        shards = {shard for (shard,) in connection.execute("SELECT DISTINCT shard FROM entries")}
        per_digest: dict[str, int] = {}
        for (key,) in connection.execute("SELECT key FROM entries"):
            digest = key.split("@")[0]
            per_digest[digest] = per_digest.get(digest, 0) + 1
        folders: dict[str, int] = {}
        for digest, path in connection.execute("SELECT digest, path FROM files"):
            folder = str(Path(path).parent)
            folders[folder] = folders.get(folder, 0) + per_digest.pop(digest, 0)
        return count, shards, folders

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def is_damage(error: sqlite3.DatabaseError) -> bool:
    """Whether SQLite found the file damaged ("database disk image is malformed", "file is not a
    database"), as opposed to busy, full or read-only."""
    return getattr(error, "sqlite_errorname", "").startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))


def rolled_back(connection: sqlite3.Connection) -> None:
    """A transaction's rollback, which a damaged file may refuse as well."""
    with contextlib.suppress(sqlite3.DatabaseError):
        connection.execute("ROLLBACK")


def unwritable(error: sqlite3.OperationalError) -> Exception:
    """`Unwritable` for what storage causes (a read-only folder, a full disk, a lock held past the
    timeout); any other error is las's own, and stays itself."""
    causes = ("SQLITE_READONLY", "SQLITE_FULL", "SQLITE_CANTOPEN", "SQLITE_IOERR", "SQLITE_BUSY", "SQLITE_PERM")
    name = getattr(error, "sqlite_errorname", "")
    return Unwritable(str(error)) if name.startswith(causes) else error


def in_memory() -> sqlite3.Connection:
    connection = sqlite3.connect(":memory:", isolation_level=None)
    connection.executescript(SCHEMA)
    return connection


def checksum(data: bytes | np.ndarray) -> str:
    """The cache's one checksum: of an entry's frames, and of each row's fields."""
    return hashlib.blake2b(memoryview(data).cast("B"), digest_size=16).hexdigest()


def row_checksum(fields: Sequence[Any]) -> str:
    """Of a row's fields (numbers, and text without control characters), joined by a separator."""
    return checksum("\x1f".join(map(str, fields)).encode())


def line_checksum(record: dict[str, Any]) -> str:
    """The checksum of an older las's index line: of its fields, all but `check` itself."""
    fields = {name: value for name, value in record.items() if name != "check"}
    return checksum(json.dumps(fields, sort_keys=True).encode())


def write_rows(connection: sqlite3.Connection, entries: list[list[Any]], files: list[list[Any]]) -> None:
    """Rows of each table (their fields but the checksum, which is added), within a transaction."""
    for table, rows in (("entries", entries), ("files", files)):
        if rows:
            marks = ",".join("?" * (len(rows[0]) + 1))
            checked = [[*row, row_checksum(row)] for row in rows]
            connection.executemany(f"INSERT OR REPLACE INTO {table} VALUES ({marks})", checked)


def import_legacy(connection: sqlite3.Connection, legacy: Path) -> None:
    """Rows for the intact lines of an older las's `index.jsonl`, which is then removed (in a
    read-only folder it stays, and is read again next time)."""
    entries, files = [], []
    for line in legacy.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            record = json.loads(line)
            if record.pop("check") != line_checksum(record):
                continue
            fields = [record[name] for name in ("key", "shard", "offset", "frames", "dimension", "checksum")]
            entries.append([*fields, 0.0, None])  # its clipping and speech were not read: none is told
            path, *identity = record["source"]
            if len(identity) == 4:  # older still had no ctime: those files are hashed again once
                files.append([*identity, record["digest"], path])
    try:
        connection.execute("BEGIN IMMEDIATE")
        write_rows(connection, entries, files)
        connection.execute("COMMIT")
        legacy.unlink()
    except (sqlite3.OperationalError, OSError):
        with contextlib.suppress(sqlite3.OperationalError):
            connection.execute("ROLLBACK")
