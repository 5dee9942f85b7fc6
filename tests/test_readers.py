"""Every input format a user may have, built from the same AN4 utterances, gives the same records."""

import json
import shutil
from pathlib import Path

import pytest

from las.data.manifest import read_utterances
from las.errors import LasError

from .conftest import AN4, an4_rows, write_manifest

ROWS = an4_rows("train", 3)


def records(path: Path, require_text: bool = True) -> list[tuple[str, bytes, str | None]]:
    return [(u.id, u.audio.read_bytes(), u.text) for u in read_utterances(path, require_text)]


@pytest.fixture
def expected() -> list[tuple[str, bytes, str]]:
    return [(identifier, Path(audio).read_bytes(), text) for identifier, audio, _, text in ROWS]


def test_tsv_manifest(tmp_path: Path, expected: list) -> None:
    assert records(write_manifest(tmp_path / "m.tsv", ROWS)) == expected


def test_jsonl_manifest_with_relative_paths_and_optional_ids(tmp_path: Path, expected: list) -> None:
    for identifier, audio, _, _ in ROWS:
        shutil.copy(audio, tmp_path / f"{identifier}.flac")
    lines = [
        {"audio_filepath": f"{identifier}.flac", "duration": float(duration), "text": text}
        | ({"id": identifier} if index == 0 else {})
        for index, (identifier, _, duration, text) in enumerate(ROWS)
    ]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert records(manifest) == expected


def test_kaldi_data_directory(tmp_path: Path, expected: list) -> None:
    (tmp_path / "wav.scp").write_text("".join(f"{identifier} {audio}\n" for identifier, audio, _, _ in ROWS))
    (tmp_path / "text").write_text("".join(f"{identifier} {text}\n" for identifier, _, _, text in reversed(ROWS)))
    assert records(tmp_path) == expected


def test_librispeech_layout(tmp_path: Path, expected: list) -> None:
    chapter = tmp_path / "speaker" / "chapter"
    chapter.mkdir(parents=True)
    for identifier, audio, _, _ in ROWS:
        shutil.copy(audio, chapter / f"{identifier}.flac")
    (chapter / "speaker-chapter.trans.txt").write_text("".join(f"{row[0]} {row[3]}\n" for row in ROWS))
    assert records(tmp_path) == expected


def test_audio_folder_and_single_file_have_no_transcripts(tmp_path: Path, expected: list) -> None:
    for identifier, audio, _, _ in ROWS:
        shutil.copy(audio, tmp_path / f"{identifier}.flac")
    assert records(tmp_path, require_text=False) == [(i, audio, None) for i, audio, _ in sorted(expected)]
    assert records(Path(ROWS[0][1]), require_text=False) == [(expected[0][0], expected[0][1], None)]


def test_piped_wav_scp_is_refused(tmp_path: Path) -> None:
    (tmp_path / "wav.scp").write_text(f"a {ROWS[0][1]}\nb sox {ROWS[1][1]} -t wav - |\n")
    with pytest.raises(LasError, match=r"wav.scp:2: 'b' is read through a command .* las reads audio files only"):
        read_utterances(tmp_path, require_text=False)


def test_kaldi_transcript_missing_for_an_id(tmp_path: Path) -> None:
    (tmp_path / "wav.scp").write_text(f"a {ROWS[0][1]}\nb {ROWS[1][1]}\n")
    (tmp_path / "text").write_text("a YES\n")
    with pytest.raises(LasError, match=r"wav.scp:2: 'b' has no transcript in .*text"):
        read_utterances(tmp_path)


def test_bad_jsonl_line_and_duplicate_ids_across_folders(tmp_path: Path) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"audio_filepath": ROWS[0][1], "text": "A"}) + '\n{"text": "B"}\n')
    with pytest.raises(LasError, match=r"m.jsonl:2: expected a JSON object with 'audio_filepath'"):
        read_utterances(manifest)
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        shutil.copy(AN4 / "audio" / "an10-fjmd-b.flac", tmp_path / folder / "same.flac")
    with pytest.raises(LasError, match=r"two/same.flac: duplicate id 'same' \(first at .*one/same.flac\)"):
        read_utterances(tmp_path, require_text=False)
