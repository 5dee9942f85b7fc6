"""Transcript files: writing decoder output and reading hypotheses or references for scoring.

Formats: Kaggle/HW4 CSV (`id,label`), Kaldi `text` (`id transcript`), JSONL (`id`, `text`, ...),
and for reading also every input `las train` and `las decode` read (a TSV, NeMo or Lhotse
manifest, a LibriSpeech folder, a Kaldi data directory): any of them scores as a reference.
Reading picks the format from the file name, falling back to Kaldi text.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from las.core.errors import LasError
from las.core.files import read_text
from las.core.text import clean_transcript
from las.data.corpora.manifest import lhotse_kind, manifest_rows, read_utterances

FORMATS = ("csv", "kaldi", "jsonl")


@dataclass(frozen=True)
class Transcript:
    id: str
    text: str
    extra: dict[str, Any] = field(default_factory=dict)  # JSONL only: score, n-best, ...


def write_transcripts(transcripts: Iterable[Transcript], output_format: str, stream: TextIO) -> None:
    if output_format == "csv":
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(["id", "label"])
        writer.writerows([transcript.id, transcript.text] for transcript in transcripts)
    elif output_format == "kaldi":  # one line each, split at whitespace: a newline or tab in a text is a space
        stream.writelines(f"{transcript.id} {' '.join(transcript.text.split())}\n" for transcript in transcripts)
    elif output_format == "jsonl":
        for transcript in transcripts:
            stream.write(
                json.dumps({"id": transcript.id, "text": transcript.text, **transcript.extra}, allow_nan=False) + "\n"
            )
    else:
        raise LasError(f"unknown output format {output_format!r} (choose from {', '.join(FORMATS)})")


def read_transcripts(path: str | Path) -> dict[str, str]:
    """id -> text of a CSV, JSONL, TSV manifest or Kaldi text file, or of any input the manifest
    readers take (a folder, a NeMo or Lhotse manifest); duplicate ids are an error."""
    path = Path(path)
    if path.is_dir() or _is_manifest_of_audio(path):
        # Transcripts alone: the audio need not be there, and an empty one says nothing was said.
        utterances = read_utterances(path, require_text=False, require_audio=False)
        if any(utterances.texts.missing):
            raise LasError(f"{path}: has no transcripts; scoring needs them")
        return dict(zip(utterances.ids, utterances.texts, strict=True))
    content = read_text(path)
    suffix = path.suffix.lower()
    reader = {".csv": _csv_rows, ".jsonl": _jsonl_rows, ".json": _jsonl_rows, ".tsv": _tsv_rows}.get(suffix)
    if reader is None:  # Kaldi `text` has no suffix; neither has `las decode --out hyp`'s CSV
        reader = _csv_rows if content.split("\n", 1)[0].strip() == "id,label" else _kaldi_rows
    transcripts: dict[str, str] = {}
    lines: dict[str, int] = {}
    for line, identifier, text in reader(content, path):
        if identifier in transcripts:
            raise LasError(f"{path}:{line}: duplicate id {identifier!r} (first on line {lines[identifier]})")
        transcripts[identifier] = clean_transcript(text)
        lines[identifier] = line
    return transcripts


def _is_manifest_of_audio(path: Path) -> bool:
    """Whether a JSON-lines file is a NeMo or Lhotse manifest (its first object names audio, where
    `las decode --format jsonl` writes an `id` and a `text`), gzipped or not."""
    if not path.name.lower().endswith((".jsonl", ".json", ".jsonl.gz", ".json.gz")):
        return False
    if path.name.lower().endswith(".gz"):
        return True  # decoding output is never gzipped
    first = next((line for line in read_text(path).splitlines() if line.strip()), "")
    try:
        record = json.loads(first)
    except json.JSONDecodeError:
        return False  # _jsonl_rows says what is wrong with it
    return isinstance(record, dict) and ("audio_filepath" in record or lhotse_kind(record) is not None)


Rows = Iterator[tuple[int, str, str]]  # (line number, id, text)


def _csv_rows(content: str, path: Path) -> Rows:
    rows = csv.reader(io.StringIO(content))
    header = next(rows, None)
    if header is None or [name.strip() for name in header[:2]] != ["id", "label"]:
        raise LasError(f"{path}:1: expected a CSV header 'id,label', got {header}")
    for line, row in enumerate(rows, start=2):
        if not row:
            continue
        if len(row) != 2:
            raise LasError(f"{path}:{line}: expected 2 comma-separated fields (id,label), got {len(row)}")
        yield line, row[0], row[1]


def _jsonl_rows(content: str, path: Path) -> Rows:
    for line, text in enumerate(content.splitlines(), start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
            yield line, str(record["id"]), str(record["text"])
        except (json.JSONDecodeError, KeyError, TypeError):
            raise LasError(f"{path}:{line}: expected a JSON object with 'id' and 'text'") from None


def _tsv_rows(content: str, path: Path) -> Rows:
    for line, (identifier, _, _, text) in manifest_rows(path):
        yield line, identifier, text.strip()


def _kaldi_rows(content: str, path: Path) -> Rows:
    for line, text in enumerate(content.splitlines(), start=1):
        if not text.strip():
            continue
        identifier, _, transcript = text.strip().partition(" ")
        yield line, identifier, transcript.strip()
