"""Word times as NIST CTM (`utterance channel start duration word`), the format scoring and
alignment tools exchange them in."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple, TextIO

from las.core.errors import LasError
from las.core.files import read_text


class WordTime(NamedTuple):
    word: str
    start: float  # seconds from the utterance's start
    end: float


def write_ctm(
    alignments: Iterable[tuple[str, list[WordTime]]], stream: TextIO, digests: Mapping[str, str] | None = None
) -> None:
    """CTM lines of each utterance's words; before them, where `digests` has the utterance, a
    comment `;; <id> sha256 <digest>` naming the content they were aligned on (`read_digests`)."""
    for identifier, words in alignments:
        if digests and identifier in digests:
            stream.write(f";; {identifier} sha256 {digests[identifier]}\n")
        for word in words:
            stream.write(f"{identifier} 1 {word.start:.3f} {word.end - word.start:.3f} {word.word}\n")


def read_ctm(path: str | Path) -> dict[str, list[WordTime]]:
    """Each utterance's words in time order from a CTM file (a sixth field, a confidence, is
    allowed and ignored)."""
    alignments: dict[str, list[WordTime]] = {}
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        fields = line.split()
        if not fields or line.startswith(";;"):
            continue
        where = f"{path}:{number}"
        if len(fields) not in (5, 6):
            raise LasError(f"{where}: expected 'utterance channel start duration word', got {line.strip()!r}")
        try:
            start, duration = float(fields[2]), float(fields[3])
        except ValueError:
            raise LasError(f"{where}: start and duration are not seconds: {fields[2]!r}, {fields[3]!r}") from None
        if not (math.isfinite(start) and math.isfinite(duration)) or start < 0 or duration < 0:
            raise LasError(f"{where}: start and duration must be finite and not negative, got {start} and {duration}")
        alignments.setdefault(fields[0], []).append(WordTime(fields[4], start, round(start + duration, 6)))
    return {identifier: sorted(words, key=lambda word: word.start) for identifier, words in alignments.items()}


def read_digests(path: str | Path) -> dict[str, str]:
    """The sha256 of each utterance's file when `las align` found its word times (its `;; <id>
    sha256 <digest>` comments): word times of content that changed since are stale."""
    digests = {}
    for line in read_text(path).splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[0] == ";;" and fields[2] == "sha256":
            digests[fields[1]] = fields[3]
    return digests
