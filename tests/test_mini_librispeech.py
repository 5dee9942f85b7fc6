"""Mini LibriSpeech's preparation (data/mini-librispeech/prepare.py) on a train-clean-5 laid out as
LibriSpeech lays it out, built from AN4 utterances: each speaker in the split speakers.tsv names,
the manifests read by las as its own, and a folder that is not LibriSpeech's refused clearly."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
import typer
from typer.testing import CliRunner

from las.data.corpora.manifest import read_utterances

from .conftest import an4_rows, run

RECIPE = Path(__file__).resolve().parent.parent / "data" / "mini-librispeech"


def prepare_module() -> ModuleType:
    """The preparation script, loaded as a module."""
    spec = importlib.util.spec_from_file_location("mini_librispeech_prepare", RECIPE / "prepare.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def fake_subset(root: Path, speakers: list[str]) -> Path:
    """LibriSpeech/train-clean-5 with one chapter of one utterance per speaker."""
    rows = an4_rows("train", len(speakers))
    subset = root / "LibriSpeech" / "train-clean-5"
    for speaker, (_, audio, _, text) in zip(speakers, rows, strict=True):
        chapter = subset / speaker / "100"
        chapter.mkdir(parents=True)
        shutil.copy(audio, chapter / f"{speaker}-100-0000.flac")
        (chapter / f"{speaker}-100.trans.txt").write_text(f"{speaker}-100-0000 {text}\n")
    return subset


def test_every_speaker_lands_in_its_split_and_las_reads_the_manifests(tmp_path: Path) -> None:
    prepare = prepare_module()
    splits = prepare.read_speakers()
    assert set(splits.values()) == {"train", "choose", "report"} and len(splits) == 28
    sexes = [line.split("\t")[1] for line in (RECIPE / "speakers.tsv").read_text().splitlines()[1:]]
    assert sexes.count("F") == 16 and sexes.count("M") == 12
    held_out = [speaker for speaker, split in splits.items() if split != "train"]
    fake_subset(tmp_path / "source", held_out + ["32"])
    out = tmp_path / "manifests"
    result = CliRunner().invoke(prepare.app, ["--source", str(tmp_path / "source"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    for split in prepare.SPLITS:
        utterances = read_utterances(out / f"{split}.tsv")
        speakers = {identifier.split("-")[0] for identifier in utterances.ids}
        assert speakers == {speaker for speaker in held_out + ["32"] if splits[speaker] == split}
        assert all(Path(location).is_file() for location in utterances.locations)  # relative to the manifest
    assert len(read_utterances(out / "choose.tsv")) == len(read_utterances(out / "report.tsv")) == 4


def test_a_folder_without_train_clean_5_or_an_unknown_speaker_is_refused(tmp_path: Path) -> None:
    prepare = prepare_module()
    with pytest.raises(typer.BadParameter, match="no train-clean-5 folder"):
        prepare.find_subset(tmp_path)
    subset = fake_subset(tmp_path, ["99999"])
    with pytest.raises(typer.BadParameter, match="speaker 99999 is not in speakers.tsv"):
        prepare.write_manifests(subset, tmp_path / "out", prepare.read_speakers())


def test_the_download_is_unpacked_and_one_that_fails_or_is_damaged_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenSLR's archive stood in for by a file: URL (no network in tests)."""
    import tarfile

    prepare = prepare_module()
    subset = fake_subset(tmp_path / "source", ["19"])
    archive = tmp_path / "train-clean-5.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(subset.parent, arcname="LibriSpeech")
    monkeypatch.setattr(prepare, "URL", archive.as_uri())
    found = prepare.download(tmp_path / "corpus")
    assert found == tmp_path / "corpus" / "LibriSpeech" / "train-clean-5" and (found / "19").is_dir()
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(archive.read_bytes()[:100])
    for url in (damaged.as_uri(), (tmp_path / "missing.tar.gz").as_uri()):
        monkeypatch.setattr(prepare, "URL", url)
        with pytest.raises(typer.BadParameter, match="cannot download and unpack .*pass --source"):
            prepare.download(tmp_path / "again")


def test_the_shipped_model_decodes_a_recording_and_fits_the_repository(tmp_path: Path) -> None:
    """data/mini-librispeech/model: the recipe's model as an int8 export that a fresh clone decodes
    (its accuracy is RESULTS.md's; AN4's spelled letters are not what it was trained to read)."""
    pytest.importorskip("onnxruntime")
    model = RECIPE / "model"
    assert sum(file.stat().st_size for file in model.iterdir()) <= 25 * 2**20
    code, stdout, stderr = run("info", model)
    assert code == 0, stderr
    assert "(int8)" in stdout and "epochs        22" in stdout
    assert "decodes with  decode.other_speed=0 decode.ctc_weight=0.2" in stdout  # the recipe's decoding
    assert "decode.lm_weight=0.3 decode.beam_size=32" in stdout
    assert f"decode.lm={model / 'lm.pt'}" in stdout  # with its own copy of the LM
    _, audio, _, _ = an4_rows("dev", 1)[0]
    code, stdout, stderr = run("decode", model, audio)
    assert code == 0, stderr
    header, row = stdout.strip().splitlines()
    text = row.split(",", 1)[1]
    assert header == "id,label" and text and set(text) <= set(" 'ABCDEFGHIJKLMNOPQRSTUVWXYZ")
