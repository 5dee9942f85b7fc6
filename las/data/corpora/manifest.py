"""Readers that turn what a user has into utterance records, one small reader per format."""

from __future__ import annotations

import collections
import contextlib
import csv
import gzip
import io
import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from las.core.errors import LasError
from las.core.progress import warn
from las.core.text import Vocabulary, clean_transcript
from las.data.corpora.arrays import load_array
from las.data.corpora.utterances import Utterance, Utterances
from las.data.front_end.audio import (
    AUDIO_SUFFIXES,
    UNREADABLE_SUFFIXES,
    Segment,
    conversion_hint,
    cut_short,
    file_head,
    narrow_band,
    sample_rate,
)

TSV_HEADER = ["id", "path", "duration_s", "text"]


def read_utterances(
    path: str | Path,
    require_text: bool = True,
    input_format: str = "auto",
    skip_bad: bool = False,
    require_audio: bool = True,
) -> Utterances:
    """Utterances of whatever `path` is: a TSV or JSONL (NeMo) manifest, a Kaldi data directory
    (`wav.scp` + `text`), a LibriSpeech tree (`*.trans.txt`), HW4 features (an object `.npy`, or a
    folder of per-utterance `.npy` files), a folder of audio files, or one audio file; or what
    `input_format` names. Every reader yields the same records, checked the same way; unusable
    ones are an error, or with `skip_bad` left out with a warning. Without `require_audio` (the
    transcripts alone are wanted: references to score against), audio files need not exist."""
    if not str(path).strip():  # Path("") is the current directory: never what was meant
        raise LasError("input path is empty")
    path = Path(path)
    if not path.exists():
        if path.is_symlink():  # it names something: say what, or the link looks like a file that vanished
            raise LasError(f"input not found: {path} is a symbolic link to {os.readlink(path)}, which does not resolve")
        raise LasError(f"input not found: {path}")
    if input_format == "auto":
        reader = _reader_for(path)
    elif input_format not in READERS:
        raise LasError(f"--input-format {input_format!r}: expected auto or one of {', '.join(READERS)}")
    elif input_format in FOLDER_FORMATS and not path.is_dir():
        raise LasError(f"{path}: --input-format {input_format} reads a folder, this is a file")
    elif input_format in FILE_FORMATS and path.is_dir():
        raise LasError(f"{path}: --input-format {input_format} reads a file, this is a folder")
    else:
        reader = READERS[input_format]
    try:
        utterances = _checked(reader, path, skip_bad, require_text, require_audio)
    except UnicodeDecodeError as error:
        raise LasError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except OSError as error:  # a folder where a file should be, no permission, ...
        raise LasError(f"cannot read {error.filename or path}: {error.strerror or error}") from None
    if require_text and any(utterances.texts.missing):
        raise LasError(f"{path}: has no transcripts; training and scoring need them")
    return utterances


Records = Iterator[tuple[str, Utterance]]  # (where it was read, e.g. "file:line"; the utterance)


def _reader_for(path: Path) -> Callable[[Path], Records]:
    if path.is_dir():
        if (path / "wav.scp").is_file():
            return _kaldi_records
        if next(path.rglob("*.trans.txt"), None) is not None:
            return _librispeech_records
        if _feature_folder(path) is not None:
            return _feature_folder_records
        return _audio_records
    suffix = path.suffix.lower()
    if suffix in AUDIO_SUFFIXES:
        return _audio_records
    if suffix in UNREADABLE_SUFFIXES:
        raise LasError(f"{path}: an audio format las cannot read{conversion_hint(path)}")
    if suffix == ".tsv":
        return _tsv_records
    if suffix == ".npy":
        return _feature_array_records
    if suffix in (".jsonl", ".json") or path.name.lower().endswith((".jsonl.gz", ".json.gz")):
        return _json_lines_records
    raise LasError(
        f"{path}: unknown input format (expected a .tsv or .jsonl manifest, a Kaldi data directory, "
        "a LibriSpeech folder, a folder of audio files or an audio file)"
    )


def _checked(
    reader: Callable[[Path], Records],
    source: Path,
    skip_bad: bool,
    require_text: bool = True,
    require_audio: bool = True,
) -> Utterances:
    """The utterances `reader` reads from `source`, refusing empty or duplicate ids, and unusable
    utterances (an empty transcript where transcripts are needed, missing audio, non-finite
    features) — or with `skip_bad`, leaving those out."""
    utterances = Utterances()
    # Ids only: where each was read is found again for the error (a million "file:line" strings
    # held for a duplicate that rarely comes were 100 MB).
    seen: set[str] = set()
    skipped: list[str] = []
    for where, utterance in reader(source):
        if utterance.text is not None:
            utterance.text = clean_transcript(utterance.text)
        if not utterance.id:
            raise LasError(f"{where}: empty id")
        if not utterance.id.isprintable() or any(character.isspace() for character in utterance.id):
            # Kaldi text, CSV rows and file names of outputs all rely on ids being single words.
            raise LasError(f"{where}: id {utterance.id!r} has whitespace or control characters")
        if utterance.id in seen:
            with contextlib.redirect_stderr(io.StringIO()):  # its warnings were given on the first reading
                first = next(place for place, earlier in reader(source) if earlier.id == utterance.id)
            raise LasError(f"{where}: duplicate id {utterance.id!r} (first at {first})")
        seen.add(utterance.id)
        problem = _problem(utterance, require_text, require_audio)
        if problem and not skip_bad:
            raise LasError(f"{where}: {problem}")
        if problem:
            skipped.append(f"{where}: {problem}")
        else:
            utterances.append(utterance)
    report_skipped(source, skipped)
    if not utterances:
        raise LasError(f"{source}: no utterances" + (" left" if skipped else ""))
    return utterances


def _problem(utterance: Utterance, require_text: bool, require_audio: bool = True) -> str | None:
    """What makes an utterance unusable, if anything. An empty transcript trains nothing (often a
    column left blank by mistake), but as a reference for decoding it says that nothing is said."""
    if require_text and utterance.text is not None and not utterance.text:
        return f"empty transcript for {utterance.id!r}"
    if not require_audio:
        return None
    if utterance.features is None and not os.path.isfile(utterance.location):  # text: no Path per row
        return f"{utterance.file_kind} not found: {utterance.file}{windows_path_hint(utterance.location)}"
    return None if utterance.features is None else non_finite_problem(utterance.features)


def windows_path_hint(location: str) -> str:
    """What to tell of a path not found that is found with its backslashes read as folders (a
    manifest written on Windows); "" otherwise."""
    if "\\" not in location:
        return ""
    posix = location.replace("\\", "/")
    return f" ({posix} exists: write paths with '/')" if os.path.isfile(posix) else ""


def report_skipped(source: str | Path, skipped: list[str]) -> None:
    """One warning for the utterances left out of `source` (data.bad_utterances=skip)."""
    if skipped:
        warn(f"{source}: skipped {len(skipped)} unusable utterances (data.bad_utterances=skip), first {skipped[0]}")


def _resolve(audio: str, base: Path) -> Path:
    """An audio path as written in a manifest in folder `base`: absolute, or relative to `base` —
    never to the current directory, so a manifest means the same files wherever las runs."""
    return base / Path(audio)  # an absolute path stays itself


def manifest_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, [id, path, duration_s, text]) for each data line of a TSV manifest."""
    with open(path, newline="", encoding="utf-8-sig") as file:
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
    base = os.path.abspath(path.parent)  # joined as text: a Path per row was a tenth of a million rows' start-up
    for line, (identifier, audio, duration, text) in manifest_rows(path):
        try:
            seconds = float(duration)
        except ValueError:
            raise LasError(f"{path}:{line}: duration_s {duration!r} is not a number") from None
        if not (math.isfinite(seconds) and seconds >= 0):
            raise LasError(f"{path}:{line}: duration_s {duration!r} is not a length in seconds (finite, >= 0)")
        yield f"{path}:{line}", Utterance(identifier, os.path.normpath(os.path.join(base, audio)), text.strip())


def _json_objects(path: Path) -> Iterator[tuple[str, object]]:
    """(where, the value) of each non-empty line of a JSON-lines file, gzipped or not."""
    opened = gzip.open if path.name.lower().endswith(".gz") else open
    with opened(path, "rt", encoding="utf-8-sig") as file:
        for line, content in enumerate(file, start=1):
            if content.strip():
                where = f"{path}:{line}"
                try:
                    yield where, json.loads(content)
                except json.JSONDecodeError:
                    raise LasError(f"{where}: not a JSON value") from None


# What each of Lhotse's manifests holds, as its first object shows it: a cut of any type (a MixedCut
# has `tracks`, not a `recording`), or a recording or supervision manifest, which are not cuts.
LHOTSE_CUT_TYPES = ("MonoCut", "MixedCut", "PaddingCut", "MultiCut", "DataCut")
LHOTSE_CUT_FIELDS = ("recording", "tracks", "supervisions")
LHOTSE_OTHER_MANIFESTS = {
    "RecordingSet": ("sources", "sampling_rate", "num_samples"),
    "SupervisionSet": ("recording_id", "start", "duration"),
}


def _json_lines_records(path: Path) -> Records:
    """A NeMo manifest or Lhotse cuts, told apart by the first object (`lhotse_kind`)."""
    first = next((record for _, record in _json_objects(path)), None)
    kind = lhotse_kind(first)
    if kind in LHOTSE_OTHER_MANIFESTS:
        raise LasError(f"{path}: a Lhotse {kind} manifest; las reads Lhotse cut manifests (CutSet.to_file)")
    yield from (_lhotse_records if kind == "CutSet" else _jsonl_records)(path)


def lhotse_kind(record: object) -> str | None:
    """Which Lhotse manifest a JSON object is a line of (CutSet, RecordingSet, SupervisionSet), if
    any: a NeMo manifest's line has an `audio_filepath`."""
    if not isinstance(record, dict) or "audio_filepath" in record:
        return None
    if record.get("type") in LHOTSE_CUT_TYPES or any(field in record for field in LHOTSE_CUT_FIELDS):
        return "CutSet"
    return next((kind for kind, fields in LHOTSE_OTHER_MANIFESTS.items() if all(f in record for f in fields)), None)


def _jsonl_records(path: Path) -> Records:
    """NeMo manifests: one object per line with `audio_filepath`, `duration`, `text` and optionally
    `id` and `offset`; with `offset`, the utterance is the `duration` seconds from there."""
    for where, record in _json_objects(path):
        try:
            audio = _resolve(str(record["audio_filepath"]), path.parent)  # type: ignore[index]
        except (KeyError, TypeError):
            raise LasError(f"{where}: expected a JSON object with 'audio_filepath' (and 'text')") from None
        assert isinstance(record, dict)
        segment = None
        if record.get("offset") is not None:
            if record.get("duration") is None:
                raise LasError(f"{where}: 'offset' needs a 'duration' (the segment's length in seconds)")
            segment = _segment(record["offset"], record["duration"], where)
        text = record.get("text")
        identifier = str(record.get("id") or file_id(audio) + ("" if segment is None else f"_{segment}"))
        yield where, Utterance(identifier, audio, None if text is None else str(text).strip(), segment=segment)


def _lhotse_records(path: Path) -> Records:
    """Lhotse cut manifests (`CutSet.to_file`, JSON lines, gzipped or not), read without Lhotse:
    each `MonoCut` is the part of its recording's one audio file from `start` for `duration`
    seconds, its transcript its supervisions' texts in time order (none: decoding only)."""
    for where, cut in _json_objects(path):
        try:
            problem = _lhotse_problem(cut)  # type: ignore[arg-type]
            if problem:
                raise LasError(f"{where}: {problem}")
            recording = cut["recording"]  # type: ignore[index]
            start, duration = float(cut["start"]), float(cut["duration"])  # type: ignore[index]
            whole = start == 0 and math.isclose(duration, float(recording["duration"]), abs_tol=1e-3)
            supervisions = sorted(cut["supervisions"], key=lambda item: item["start"])  # type: ignore[index]
            spoken = [str(item["text"]).strip() for item in supervisions if item.get("text") is not None]
            audio = _resolve(str(recording["sources"][0]["source"]), path.parent)
            identifier = str(cut["id"])  # type: ignore[index]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise LasError(f"{where}: expected a Lhotse cut (id, start, duration, supervisions, recording)") from None
        segment = None if whole else _segment(start, duration, where)
        yield where, Utterance(identifier, audio, " ".join(spoken) if spoken else None, segment=segment)


def _lhotse_problem(cut: dict) -> str | None:
    """Why las cannot read a Lhotse cut, if it cannot: las reads one-channel audio files, not
    features alone, several recordings mixed, URLs, commands or Lhotse Shar."""
    kind, recording = cut.get("type", "MonoCut"), cut.get("recording")
    if kind != "MonoCut":
        return f"a Lhotse {kind} is not read; las reads cuts of one recording (MonoCut)"
    if recording is None:
        return f"cut {cut['id']!r} has no recording (las computes features from audio)"
    sources, channels, named = recording["sources"], recording.get("channel_ids", [0]), f"recording {recording['id']!r}"
    if len(sources) != 1 or sources[0]["type"] != "file":
        return f"{named} is read from {', '.join(source['type'] for source in sources)}; las reads audio files"
    if len(channels) != 1:
        return f"{named} has {len(channels)} channels; las reads one"
    if sources[0].get("channels", [0]) != [0]:  # one channel of a file of several: reading it would mix them
        return f"{named} is channel {sources[0]['channels']} of its file; las reads one-channel files"
    return None


def _segment(start: object, duration: object, where: str) -> Segment:
    try:
        return Segment(float(start), None if duration is None else float(duration))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise LasError(f"{where}: segment times must be numbers of seconds, got {start!r} and {duration!r}") from None
    except LasError as error:
        raise LasError(f"{where}: {error}") from None


def _kaldi_records(directory: Path) -> Records:
    """`wav.scp` (`id path`), when present `segments` (`utterance recording start end`, end -1 for
    the end of the file: the utterances are those parts of the recordings) and `text` (`id
    transcript`). Paths are relative to the directory; piped commands are refused."""
    transcripts: dict[str, str] = {}
    if (directory / "text").is_file():
        for _, identifier, text in _id_lines(directory / "text"):
            transcripts[identifier] = text
    scp = directory / "wav.scp"
    recordings: dict[str, tuple[str, Path]] = {}  # id -> (where it was read, audio)
    for line, identifier, audio in _id_lines(scp):
        if audio.endswith("|") or " " in audio:
            raise LasError(
                f"{scp}:{line}: {identifier!r} is read through a command ({audio!r}); las reads audio files only: "
                "write the audio to files (e.g. with sox) and list their paths"
            )
        if identifier in recordings:
            raise LasError(f"{scp}:{line}: duplicate id {identifier!r} (first at {recordings[identifier][0]})")
        recordings[identifier] = (f"{scp}:{line}", _resolve(audio, directory))
    if (directory / "segments").is_file():
        utterances = _kaldi_segments(directory / "segments", recordings)
    else:
        utterances = ((where, identifier, audio, None) for identifier, (where, audio) in recordings.items())
    for where, identifier, audio, segment in utterances:
        if transcripts and identifier not in transcripts:
            raise LasError(f"{where}: {identifier!r} has no transcript in {directory / 'text'}")
        yield where, Utterance(identifier, audio, transcripts.get(identifier), segment=segment)


def _kaldi_segments(path: Path, recordings: dict[str, tuple[str, Path]]) -> Iterator[tuple[str, str, Path, Segment]]:
    """(where, utterance id, recording's audio, segment) of each line of a Kaldi `segments` file."""
    for line, identifier, rest in _id_lines(path):
        where = f"{path}:{line}"
        fields = rest.split()
        if len(fields) != 3:
            raise LasError(f"{where}: expected 'utterance recording start end', got {identifier} {rest!r}")
        recording, start, end = fields
        if recording not in recordings:
            raise LasError(f"{where}: recording {recording!r} is not in wav.scp")
        try:
            duration = None if float(end) == -1 else float(end) - float(start)
        except ValueError:
            raise LasError(f"{where}: start and end must be seconds, got {start!r} and {end!r}") from None
        yield where, identifier, recordings[recording][1], _segment(start, duration, where)


def _librispeech_records(directory: Path) -> Records:
    """`speaker/chapter/speaker-chapter.trans.txt` (`id TRANSCRIPT`) beside `id.flac`."""
    for transcripts in sorted(directory.rglob("*.trans.txt")):
        for line, identifier, text in _id_lines(transcripts):
            yield f"{transcripts}:{line}", Utterance(identifier, transcripts.parent / f"{identifier}.flac", text)


def file_id(path: Path) -> str:
    """An utterance id from a file's name without its suffix: whitespace and control characters
    (which ids may not hold) become underscores, so "Meeting 3.flac" is `Meeting_3`."""
    return _single_word(path.stem)


def _single_word(name: str) -> str:
    return "".join("_" if character.isspace() or not character.isprintable() else character for character in name)


def _audio_records(path: Path) -> Records:
    """One audio file, or every audio file under a folder; ids are file names without suffix, and
    where subfolders hold files of one name (spk1/take1.wav, spk2/take1.wav), their paths in the
    folder without suffix (`spk1/take1`), so that a recorder's layout decodes as it is."""
    if not path.is_dir():
        yield str(path), Utterance(file_id(path), path)
        return
    files = sorted(item for item in path.rglob("*") if item.suffix.lower() in AUDIO_SUFFIXES)
    unreadable = sorted(item for item in path.rglob("*") if item.suffix.lower() in UNREADABLE_SUFFIXES)
    if unreadable:
        example = unreadable[0]
        left_out = f"{len(unreadable)} audio file(s) in a format las cannot read: {example}{conversion_hint(example)}"
        if not files:
            raise LasError(f"{path}: no audio files las can read; {left_out}")
        warn(f"{path}: left out {left_out}")
    if not files:
        raise LasError(f"{path}: no audio files ({', '.join(AUDIO_SUFFIXES)}) in this folder")
    names = collections.Counter(file_id(file) for file in files)
    for file in files:
        identifier = file_id(file)
        if names[identifier] > 1:  # a.wav beside a.flac stays one id twice: an error that names both
            identifier = _single_word(file.relative_to(path).with_suffix("").as_posix())
        yield str(file), Utterance(identifier, file)


def _feature_array_records(path: Path) -> Records:
    """CMU 11-785 HW4 features: an object `.npy` of `(frames, dim)` arrays; transcripts, if any, in
    `<name>_transcripts.npy` beside it (arrays of words, or of characters between <sos> and <eos>).
    Ids are the array indices, as in the course's Kaggle submissions. A numeric 2-D array is one
    utterance's `(frames, dim)` features, as a per-utterance file holds them, with the file's name as id."""
    features = load_array(path)
    if features.dtype != object and features.ndim == 2:
        yield str(path), Utterance(file_id(path), None, None, _feature_matrix(features, str(path)))
        return
    transcripts_path = path.with_name(f"{path.stem}_transcripts.npy")
    transcripts = load_array(transcripts_path) if transcripts_path.exists() else None
    if transcripts is not None and len(transcripts) != len(features):
        raise LasError(f"{transcripts_path}: {len(transcripts)} transcripts for {len(features)} utterances in {path}")
    for index, array in enumerate(features):
        text = _transcript_text(transcripts[index]) if transcripts is not None else None
        yield f"{path}[{index}]", Utterance(str(index), None, text, _feature_matrix(array, f"{path}[{index}]"))


FEATURE_FOLDERS = ("mfcc", "fbank", "features")  # where HW4P2-style corpora keep per-utterance arrays


def _feature_folder(directory: Path) -> Path | None:
    """The folder of per-utterance feature `.npy` files in `directory`, if it has one."""
    for name in FEATURE_FOLDERS:
        if (directory / name).is_dir():
            return directory / name
    return directory if next(directory.glob("*.npy"), None) is not None else None


def _feature_folder_records(directory: Path) -> Records:
    """CMU 11-785 HW4P2 features: `<dir>/mfcc/<id>.npy` (or fbank/, features/, or the folder
    itself) of `(frames, dim)` arrays; transcripts, if any, in `<dir>/transcript/<id>.npy`
    (characters between <sos> and <eos>, or words)."""
    folder = _feature_folder(directory)
    if folder is None:
        raise LasError(f"{directory}: no per-utterance feature .npy files (looked in {', '.join(FEATURE_FOLDERS)})")
    transcripts = directory / "transcript"
    for file in sorted(folder.glob("*.npy")):
        text = None
        if transcripts.is_dir():
            if not (transcripts / file.name).is_file():
                raise LasError(f"{file}: no transcript {transcripts / file.name}")
            text = _transcript_text(load_array(transcripts / file.name))
        yield str(file), Utterance(file_id(file), None, text, feature_file=file)


def read_feature_file(path: Path, content: bytes | None = None) -> np.ndarray:
    """The precomputed features `(frames, dim)` float32 in the `.npy` file at `path` (or in
    `content`, its bytes), checked."""
    array = _feature_matrix(load_array(path, content), str(path))
    problem = non_finite_problem(array)
    if problem:
        raise LasError(f"{path}: {problem}")
    return array


def _feature_matrix(array: np.ndarray, where: str) -> np.ndarray:
    try:
        array = np.asarray(array, dtype=np.float32)
    except (TypeError, ValueError):
        raise LasError(f"{where}: expected a (frames, dim) array of numbers") from None
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise LasError(f"{where}: expected a (frames, dim) array of features, got shape {array.shape}")
    return array


def non_finite_problem(features: np.ndarray) -> str | None:
    finite = np.isfinite(features)
    if finite.all():
        return None
    return f"{int(features.size - finite.sum())} feature values are not finite (NaN or infinity); repair or remove it"


def _transcript_text(items: np.ndarray | str | bytes) -> str:
    """One HW4 transcript as text: words joined by spaces, or characters joined as they are."""
    if isinstance(items, bytes | str):
        items = [items]
    symbols = [item.decode() if isinstance(item, bytes) else str(item) for item in items]
    symbols = [symbol for symbol in symbols if symbol not in ("<sos>", "<eos>")]
    characters = all(len(symbol) == 1 for symbol in symbols)
    return ("" if characters else " ").join(symbols).strip()


READERS: dict[str, Callable[[Path], Records]] = {
    "tsv": _tsv_records,
    "jsonl": _jsonl_records,
    "lhotse": _lhotse_records,
    "kaldi": _kaldi_records,
    "librispeech": _librispeech_records,
    "hw4": _feature_array_records,
    "hw4-folder": _feature_folder_records,
    "audio": _audio_records,
}


FOLDER_FORMATS = ("kaldi", "librispeech", "hw4-folder")
FILE_FORMATS = ("tsv", "jsonl", "lhotse", "hw4")


def _id_lines(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, id, rest of the line) of a Kaldi-style `id value` file."""
    if not path.is_file():
        raise LasError(f"{path}: not found")
    with open(path, encoding="utf-8-sig") as file:
        for line, content in enumerate(file, start=1):
            if content.strip():
                identifier, _, rest = content.strip().partition(" ")
                yield line, identifier, rest.strip()


def check_characters(
    utterances: Sequence[Utterance], vocabulary: Vocabulary, source: str | Path, skip_bad: bool = False
) -> Utterances:
    """Refuse transcripts the model could never produce, rather than training on them silently
    wrong; with `skip_bad`, the utterances without them."""
    columns = Utterances.of(utterances)
    skipped: dict[int, str] = {}  # by row
    for row, text in enumerate(columns.texts):
        if text is None or not vocabulary.unknown_characters(text):
            continue  # nearly every row: read from the text column, no `Utterance` made
        problem = unknown_characters(columns[row], vocabulary)
        if not skip_bad:
            raise LasError(f"{source}: {problem}")
        skipped[row] = problem
    report_skipped(source, list(skipped.values()))
    if len(skipped) == len(columns):
        raise LasError(f"{source}: no utterances left")
    return Utterances(utterance for row, utterance in enumerate(columns) if row not in skipped) if skipped else columns


def warn_about_characters(utterances: Sequence[Utterance], vocabulary: Vocabulary, source: str | Path) -> None:
    """Decoding needs no transcripts: ones with characters the model never saw are only
    references, which `las eval` scores as they are; one warning says the model cannot match them."""
    problems = [problem for utterance in utterances if (problem := unknown_characters(utterance, vocabulary))]
    if problems:
        warn(f"{source}: {len(problems)} reference transcripts cannot be matched by this model, first: {problems[0]}")


def warn_about_audio(utterances: Sequence[Utterance], source: str | Path, out_of: int | None = None) -> None:
    """Audio files that are read, but not as well as they would be whole or wider: one warning for
    those whose samples end before their headers say (read as far as they go, where their
    transcripts may go on), one for those sampled below a telephone line's rate. `out_of`: the
    utterances of `source`, where `utterances` are a sample of them (training's: AUDIO_CHECKS)."""
    files = sorted({utterance.audio_location for utterance in utterances if utterance.audio_location})
    sampled = f" (in {len(utterances)} of its {out_of} utterances)" if out_of and out_of > len(utterances) else ""
    narrow, short = [], []
    for file in files:
        head = file_head(Path(file))  # read once for both
        if (rate := sample_rate(Path(file), head)) and (reason := narrow_band(rate)):
            narrow.append((file, reason))
        if lengths := cut_short(Path(file), head):
            short.append((file, lengths))
    if narrow:
        file, reason = narrow[0]
        warn(f"{source}: {len(narrow)} audio file(s) below a telephone line's rate{sampled}, first {file}, {reason}")
    if short:
        file, (promised, held) = short[0]
        warn(
            f"{source}: {len(short)} audio file(s) cut short (a recording or download interrupted?){sampled}, read "
            f"as far as they go: first {file}, {held:.2f} s of the {promised:.2f} s its header promises"
        )


def unknown_characters(utterance: Utterance, vocabulary: Vocabulary) -> str:
    """What is wrong with the transcript of `utterance` for `vocabulary`; "" for nothing."""
    unknown = vocabulary.unknown_characters(utterance.text) if utterance.text is not None else set()
    if not unknown:
        return ""
    listed = ", ".join(repr(character) for character in sorted(unknown))
    return f"transcript of {utterance.id!r} has characters outside the vocabulary: {listed}"
