"""Readers that turn what a user has into utterance records, one small reader per format."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from las.data.audio import AUDIO_SUFFIXES
from las.errors import LasError
from las.text import Vocabulary

TSV_HEADER = ["id", "path", "duration_s", "text"]


@dataclass(frozen=True, eq=False)
class Utterance:
    id: str
    audio: Path | None  # None for precomputed features
    text: str | None = None  # None when transcripts are unknown (decoding raw audio)
    features: np.ndarray | None = None  # (frames, dim) precomputed (CMU 11-785 HW4 style); skips extraction


def read_utterances(path: str | Path, require_text: bool = True) -> list[Utterance]:
    """Utterances of whatever `path` is: a TSV or JSONL (NeMo) manifest, a Kaldi data directory
    (`wav.scp` + `text`), a LibriSpeech tree (`*.trans.txt`), a folder of audio files, or one
    audio file. Every reader yields the same records, checked the same way."""
    path = Path(path)
    if not path.exists():
        raise LasError(f"input not found: {path}")
    utterances = _checked(_reader_for(path)(path), path)
    if require_text and any(utterance.text is None for utterance in utterances):
        raise LasError(f"{path}: has no transcripts; training and scoring need them")
    return utterances


Records = Iterator[tuple[str, Utterance]]  # (where it was read, e.g. "file:line"; the utterance)


def _reader_for(path: Path) -> Callable[[Path], Records]:
    if path.is_dir():
        if (path / "wav.scp").is_file():
            return _kaldi_records
        if next(path.rglob("*.trans.txt"), None) is not None:
            return _librispeech_records
        return _audio_folder_records
    suffix = path.suffix.lower()
    if suffix in AUDIO_SUFFIXES:
        return lambda file: iter([(str(file), Utterance(file.stem, file))])
    if suffix == ".tsv":
        return _tsv_records
    if suffix == ".npy":
        return _feature_array_records
    if suffix in (".jsonl", ".json"):
        return _jsonl_records
    raise LasError(
        f"{path}: unknown input format (expected a .tsv or .jsonl manifest, a Kaldi data directory, "
        "a LibriSpeech folder, a folder of audio files or an audio file)"
    )


def _checked(records: Records, source: Path) -> list[Utterance]:
    """The utterances, refusing empty or duplicate ids, empty transcripts and missing audio."""
    utterances: list[Utterance] = []
    first: dict[str, str] = {}
    for where, utterance in records:
        if not utterance.id:
            raise LasError(f"{where}: empty id")
        if utterance.id in first:
            raise LasError(f"{where}: duplicate id {utterance.id!r} (first at {first[utterance.id]})")
        first[utterance.id] = where
        if utterance.text is not None and not utterance.text:
            raise LasError(f"{where}: empty transcript for {utterance.id!r}")
        if utterance.features is None and not utterance.audio.is_file():
            raise LasError(f"{where}: audio file not found: {utterance.audio}")
        utterances.append(utterance)
    if not utterances:
        raise LasError(f"{source}: no utterances")
    return utterances


def _resolve(audio: str, base: Path) -> Path:
    """An audio path as written: absolute, relative to the current directory, or else to `base`."""
    path = Path(audio)
    return path if path.is_absolute() or path.exists() else base / path


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


def _tsv_records(path: Path) -> Records:
    """`id  path  duration_s  text` with a header line; audio paths are relative to the manifest."""
    for line, (identifier, audio, duration, text) in manifest_rows(path):
        try:
            float(duration)
        except ValueError:
            raise LasError(f"{path}:{line}: duration_s {duration!r} is not a number") from None
        yield f"{path}:{line}", Utterance(identifier, path.parent / audio, text.strip())


def _jsonl_records(path: Path) -> Records:
    """NeMo manifests: one object per line with `audio_filepath`, `duration`, `text` and optionally `id`."""
    with open(path, encoding="utf-8") as file:
        for line, content in enumerate(file, start=1):
            if not content.strip():
                continue
            try:
                record = json.loads(content)
                audio = _resolve(str(record["audio_filepath"]), path.parent)
            except (json.JSONDecodeError, KeyError, TypeError):
                raise LasError(f"{path}:{line}: expected a JSON object with 'audio_filepath' (and 'text')") from None
            text = record.get("text")
            yield (
                f"{path}:{line}",
                Utterance(str(record.get("id") or audio.stem), audio, None if text is None else str(text).strip()),
            )


def _kaldi_records(directory: Path) -> Records:
    """`wav.scp` (`id path`) and, when present, `text` (`id transcript`); piped commands are refused."""
    transcripts: dict[str, str] = {}
    if (directory / "text").is_file():
        for _, identifier, text in _id_lines(directory / "text"):
            transcripts[identifier] = text
    scp = directory / "wav.scp"
    for line, identifier, audio in _id_lines(scp):
        if audio.endswith("|") or " " in audio:
            raise LasError(
                f"{scp}:{line}: {identifier!r} is read through a command ({audio!r}); las reads audio files only: "
                "write the audio to files (e.g. with sox) and list their paths"
            )
        if transcripts and identifier not in transcripts:
            raise LasError(f"{scp}:{line}: {identifier!r} has no transcript in {directory / 'text'}")
        yield f"{scp}:{line}", Utterance(identifier, _resolve(audio, directory), transcripts.get(identifier))


def _librispeech_records(directory: Path) -> Records:
    """`speaker/chapter/speaker-chapter.trans.txt` (`id TRANSCRIPT`) beside `id.flac`."""
    for transcripts in sorted(directory.rglob("*.trans.txt")):
        for line, identifier, text in _id_lines(transcripts):
            yield f"{transcripts}:{line}", Utterance(identifier, transcripts.parent / f"{identifier}.flac", text)


def _audio_folder_records(folder: Path) -> Records:
    files = sorted(item for item in folder.rglob("*") if item.suffix.lower() in AUDIO_SUFFIXES)
    if not files:
        raise LasError(f"{folder}: no audio files ({', '.join(AUDIO_SUFFIXES)}) in this folder")
    for file in files:
        yield str(file), Utterance(file.stem, file)


def _feature_array_records(path: Path) -> Records:
    """CMU 11-785 HW4 features: an object `.npy` of `(frames, dim)` arrays; transcripts, if any, in
    `<name>_transcripts.npy` beside it (arrays of words, or of characters between <sos> and <eos>).
    Ids are the array indices, as in the course's Kaggle submissions."""
    features = _load_array(path)
    transcripts_path = path.with_name(f"{path.stem}_transcripts.npy")
    transcripts = _load_array(transcripts_path) if transcripts_path.exists() else None
    if transcripts is not None and len(transcripts) != len(features):
        raise LasError(f"{transcripts_path}: {len(transcripts)} transcripts for {len(features)} utterances in {path}")
    for index, array in enumerate(features):
        array = np.asarray(array, dtype=np.float32)
        if array.ndim != 2 or array.shape[0] == 0:
            raise LasError(f"{path}[{index}]: expected a (frames, dim) array of features, got shape {array.shape}")
        text = _transcript_text(transcripts[index]) if transcripts is not None else None
        yield f"{path}[{index}]", Utterance(str(index), None, text, array)


def _load_array(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=True, encoding="bytes")  # HW4 files are object arrays
    except (OSError, ValueError) as error:
        raise LasError(f"cannot read {path}: {error}") from None


def _transcript_text(items: np.ndarray | str | bytes) -> str:
    """One HW4 transcript as text: words joined by spaces, or characters joined as they are."""
    if isinstance(items, bytes | str):
        items = [items]
    symbols = [item.decode() if isinstance(item, bytes) else str(item) for item in items]
    symbols = [symbol for symbol in symbols if symbol not in ("<sos>", "<eos>")]
    characters = all(len(symbol) == 1 for symbol in symbols)
    return ("" if characters else " ").join(symbols).strip()


def _id_lines(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, id, rest of the line) of a Kaldi-style `id value` file."""
    with open(path, encoding="utf-8") as file:
        for line, content in enumerate(file, start=1):
            if content.strip():
                identifier, _, rest = content.strip().partition(" ")
                yield line, identifier, rest.strip()


def check_characters(utterances: list[Utterance], vocabulary: Vocabulary, source: str | Path) -> None:
    """Refuse transcripts the model could never produce, rather than scoring them silently wrong."""
    for utterance in utterances:
        if utterance.text is None:
            continue
        unknown = vocabulary.unknown_characters(utterance.text)
        if unknown:
            listed = ", ".join(repr(character) for character in sorted(unknown))
            raise LasError(f"{source}: transcript of {utterance.id!r} has characters outside the vocabulary: {listed}")
