"""Readers that turn what a user has into utterance records: TSV manifests and audio files."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from las.data.audio import AUDIO_SUFFIXES
from las.errors import LasError
from las.text import Vocabulary

TSV_HEADER = ["id", "path", "duration_s", "text"]


@dataclass(frozen=True)
class Utterance:
    id: str
    audio: Path
    text: str | None = None  # None when transcripts are unknown (decoding raw audio)


def read_utterances(path: str | Path, require_text: bool = True) -> list[Utterance]:
    """Utterances of a TSV manifest, an audio file, or a folder of audio files (chosen by the path)."""
    path = Path(path)
    if path.is_dir():
        utterances = _read_audio_folder(path)
    elif not path.exists():
        raise LasError(f"input not found: {path}")
    elif path.suffix.lower() in AUDIO_SUFFIXES:
        utterances = [Utterance(path.stem, path)]
    elif path.suffix.lower() == ".tsv":
        utterances = read_tsv_manifest(path)
    else:
        raise LasError(f"{path}: unknown input format (expected a .tsv manifest, an audio file or a folder)")
    if require_text and utterances and utterances[0].text is None:
        raise LasError(f"{path}: has no transcripts; training and scoring need a manifest")
    return utterances


def manifest_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, [id, path, duration_s, text]) for each data line of a TSV manifest."""
    with open(path, newline="", encoding="utf-8") as file:
        rows = csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(rows, None)
        if header != TSV_HEADER:
            raise LasError(f"{path}:1: expected the header {' '.join(TSV_HEADER)!r} (tab-separated), got {header}")
        for line, row in enumerate(rows, start=2):
            if not row:
                continue
            if len(row) != len(TSV_HEADER):
                raise LasError(
                    f"{path}:{line}: expected 4 tab-separated fields (id, path, duration_s, text), got {len(row)}"
                )
            yield line, row


def read_tsv_manifest(path: Path) -> list[Utterance]:
    """`id  path  duration_s  text` with a header line; audio paths are relative to the manifest."""
    utterances: list[Utterance] = []
    first_line: dict[str, int] = {}
    for line, (identifier, audio, duration, text) in manifest_rows(path):
        if not identifier:
            raise LasError(f"{path}:{line}: empty id")
        if identifier in first_line:
            raise LasError(f"{path}:{line}: duplicate id {identifier!r} (first on line {first_line[identifier]})")
        first_line[identifier] = line
        try:
            float(duration)
        except ValueError:
            raise LasError(f"{path}:{line}: duration_s {duration!r} is not a number") from None
        if not text.strip():
            raise LasError(f"{path}:{line}: empty transcript for {identifier!r}")
        audio_path = path.parent / audio
        if not audio_path.is_file():
            raise LasError(f"{path}:{line}: audio file not found: {audio_path}")
        utterances.append(Utterance(identifier, audio_path, text.strip()))
    if not utterances:
        raise LasError(f"{path}: manifest has no utterances")
    return utterances


def _read_audio_folder(folder: Path) -> list[Utterance]:
    files = sorted(item for item in folder.rglob("*") if item.suffix.lower() in AUDIO_SUFFIXES)
    if not files:
        raise LasError(f"{folder}: no audio files ({', '.join(AUDIO_SUFFIXES)}) in this folder")
    utterances = [Utterance(file.stem, file) for file in files]
    ids = [utterance.id for utterance in utterances]
    if len(set(ids)) != len(ids):
        duplicate = next(identifier for identifier in ids if ids.count(identifier) > 1)
        raise LasError(f"{folder}: two audio files share the id {duplicate!r}")
    return utterances


def check_characters(utterances: list[Utterance], vocabulary: Vocabulary, source: str | Path) -> None:
    """Refuse transcripts the model could never produce, rather than scoring them silently wrong."""
    for utterance in utterances:
        if utterance.text is None:
            continue
        unknown = vocabulary.unknown_characters(utterance.text)
        if unknown:
            listed = ", ".join(repr(character) for character in sorted(unknown))
            raise LasError(f"{source}: transcript of {utterance.id!r} has characters outside the vocabulary: {listed}")
