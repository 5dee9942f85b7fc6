"""`las export`: ONNX graphs that ONNX Runtime decodes as the PyTorch model does, with every
strategy, and exports that are damaged, foreign or misused refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("onnxruntime")

from las.core.errors import LasError  # noqa: E402
from las.export.runtime import load_model  # noqa: E402
from las.export.writer import export  # noqa: E402
from las.recognition.recognizer import Recognizer  # noqa: E402

from .conftest import assert_clear_error, run, transcript_words  # noqa: E402


@pytest.fixture(scope="module")
def exported(trained_run: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("export")
    checkpoint = trained_run["run"] / "last.pt"
    code, _, stderr = run("export", checkpoint, root / "fp32")
    assert code == 0, stderr
    code, _, stderr = run("export", checkpoint, root / "int8", "--quantize", "int8")
    assert code == 0, stderr
    return {"checkpoint": checkpoint, "fp32": root / "fp32", "int8": root / "int8", "data": trained_run["train"]}


STRATEGIES = {
    "greedy": ["decode.strategy=greedy"],
    "beam with CTC": ["decode.strategy=beam", "decode.ctc_weight=0.5"],
    "beam without CTC": ["decode.strategy=beam", "decode.ctc_weight=0", "decode.beam_size=3"],
    "ctc": ["decode.strategy=ctc"],
    "sample": ["decode.strategy=sample", "decode.samples=4", "decode.ctc_weight=0.3"],
    "beam with CTC and a lexicon": ["decode.strategy=beam", "decode.ctc_weight=0.5", "decode.lexicon=LEXICON"],
}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_export_decodes_as_its_checkpoint_with_every_strategy(exported: dict[str, Path], strategy: str) -> None:
    lexicon = exported["fp32"].parent / "words.txt"  # the training transcripts' words but the first
    lexicon.write_text("".join(f"{word}\n" for word in sorted(transcript_words(exported["data"]))[1:]))
    settings = [item.replace("LEXICON", str(lexicon)) for item in STRATEGIES[strategy]] + ["decode.word_times=ctc"]
    torch_results = Recognizer(load_model(exported["checkpoint"]), "cpu", settings).transcribe(exported["data"])
    onnx_results = Recognizer(load_model(exported["fp32"]), "cpu", settings).transcribe(exported["data"])
    for expected, found in zip(torch_results, onnx_results, strict=True):
        assert found.text == expected.text
        assert found.score == pytest.approx(expected.score, abs=1e-3)
        assert [(word.word, word.start, word.end) for word in found.words] == [
            (word.word, word.start, word.end) for word in expected.words
        ]
        assert [word.confidence for word in found.words] == pytest.approx(
            [word.confidence for word in expected.words], abs=1e-3
        )


@pytest.mark.parametrize("batch", [1, 5])
def test_the_listener_graph_holds_for_any_batch_and_length(exported: dict[str, Path], batch: int) -> None:
    model = load_model(exported["checkpoint"]).build_model()
    graphs = load_model(exported["fp32"]).build_model()
    features = torch.randn(batch, 41, model.input_size)
    lengths = torch.tensor([41, 40, 17, 9, 30][:batch])
    with torch.no_grad():
        expected = model.listener(features, lengths)
    found = graphs.listener(features, lengths)
    assert torch.equal(found.lengths, expected.lengths) and torch.equal(found.mask, expected.mask)
    for name in ("keys", "values", "hidden"):
        assert torch.allclose(getattr(found, name), getattr(expected, name), atol=1e-4), name


def test_int8_stores_the_matrix_products_in_a_third_of_the_space_and_still_decodes(exported: dict[str, Path]) -> None:
    def size(folder: Path) -> int:
        return sum(path.stat().st_size for path in folder.glob("*.onnx"))

    assert size(exported["int8"]) < 0.4 * size(exported["fp32"])
    assert json.loads((exported["int8"] / "model.json").read_text())["quantize"] == "int8"
    code, stdout, _ = run("info", exported["int8"])
    assert code == 0 and "ONNX graphs (int8)" in stdout and "epochs        12" in stdout
    code, stdout, stderr = run("decode", exported["int8"], exported["data"], "--strategy", "greedy")
    assert code == 0, stderr
    assert len(stdout.strip().splitlines()) == 1 + len(exported["data"].read_text().splitlines()) - 1


def test_an_export_decodes_as_its_maker_chose_unless_told_otherwise(exported: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "chosen"
    code, _, stderr = run(
        "export", exported["checkpoint"], out, "--set", "decode.strategy=greedy", "--set", "decode.other_speed=0"
    )
    assert code == 0, stderr
    model = load_model(out)
    assert model.decoding == ("decode.strategy=greedy", "decode.other_speed=0")
    assert model.decoding_config().decode.strategy == "greedy" and model.decoding_config().decode.other_speed == 0
    assert model.decoding_config(["decode.strategy=beam"]).decode.strategy == "beam"  # the caller's word is last
    code, stdout, _ = run("info", out)
    assert code == 0 and "decodes with  decode.strategy=greedy decode.other_speed=0" in stdout
    greedy = Recognizer(load_model(exported["fp32"]), "cpu", ["decode.strategy=greedy", "decode.other_speed=0"])
    chosen = Recognizer(model, "cpu", [])
    found = chosen.transcribe(exported["data"])
    assert [result.text for result in found] == [result.text for result in greedy.transcribe(exported["data"])]
    assert load_model(exported["fp32"]).decoding == ()  # an export made without --set, as before
    for setting, message in (
        ("model.dropout=0", "model.dropout=0: a model is decoded with decode.* settings only"),
        ("decode.other_speed=fast", "expected float"),
    ):
        assert_clear_error(*run("export", exported["checkpoint"], tmp_path / "bad", "--set", setting)[::2], message)
    assert not (tmp_path / "bad").exists()


def copy_of(folder: Path, to: Path) -> Path:
    to.mkdir()
    for path in folder.iterdir():
        (to / path.name).write_bytes(path.read_bytes())
    return to


def test_damaged_foreign_and_misused_exports_are_one_clear_error(exported: dict[str, Path], tmp_path: Path) -> None:
    data = exported["data"]
    damaged = copy_of(exported["fp32"], tmp_path / "damaged")
    graph = damaged / "speller_step.onnx"
    graph.write_bytes(graph.read_bytes()[:-10])
    assert_clear_error(*run("decode", damaged, data)[::2], "damaged export: speller_step.onnx is not the file")
    (damaged / "speller_step.onnx").unlink()
    assert_clear_error(*run("decode", damaged, data)[::2], "damaged export: speller_step.onnx is missing")
    newer = copy_of(exported["fp32"], tmp_path / "newer")
    manifest = json.loads((newer / "model.json").read_text())
    (newer / "model.json").write_text(json.dumps(manifest | {"version": 99}))
    assert_clear_error(*run("decode", newer, data)[::2], "export format version 99 is not supported")
    edited = copy_of(exported["fp32"], tmp_path / "edited")
    manifest = json.loads((edited / "model.json").read_text())
    manifest["normalizer"]["mean"][0] += 1.0
    (edited / "model.json").write_text(json.dumps(manifest))
    assert_clear_error(*run("decode", edited, data)[::2], "damaged export: its settings are not those")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_clear_error(*run("decode", empty, data)[::2], "not a las export (no model.json)")
    assert_clear_error(*run("decode", exported["fp32"], data, "--device", "cuda")[::2], "decodes on the CPU")
    assert_clear_error(*run("train", "--init", exported["fp32"], "--out", tmp_path / "run")[::2], "an export")


def test_a_run_decodes_as_its_config_chose_and_its_export_with_it(exported: dict[str, Path], tmp_path: Path) -> None:
    """A run's `[decode]` settings (its recipe's decoding) travel in its checkpoints and exports."""
    from las.model.checkpoint import save_checkpoint

    trained = load_model(exported["checkpoint"])
    assert trained.decoding == ()  # a run given no decode.* settings decodes as las does by default
    config = trained.config.replace(["decode.ctc_weight=0.3", "decode.other_speed=0"])
    path = tmp_path / "chosen.pt"
    parts = (trained.vocabulary, trained.normalizer, trained.build_model(), {})
    save_checkpoint(path, config, *parts)
    model = load_model(path)
    assert model.decoding == ("decode.ctc_weight=0.3", "decode.other_speed=0.0")
    assert model.decoding_config().decode.ctc_weight == 0.3 and model.decoding_config().decode.other_speed == 0
    assert model.decoding_config(["decode.ctc_weight=0.5"]).decode.ctc_weight == 0.5  # the caller's word is last
    code, stdout, _ = run("info", path)
    assert code == 0 and "decodes with  decode.ctc_weight=0.3 decode.other_speed=0.0" in stdout
    code, _, stderr = run("export", path, tmp_path / "out", "--set", "decode.ctc_weight=0.2")
    assert code == 0, stderr
    settings = load_model(tmp_path / "out").decoding_config().decode
    assert settings.ctc_weight == 0.2 and settings.other_speed == 0  # the export's --set on top of the run's
    elsewhere = tmp_path / "lm-elsewhere.pt"  # a run whose LM was on the machine that trained it
    save_checkpoint(
        elsewhere, trained.config.replace([f"decode.lm={tmp_path / 'lm.pt'}", "decode.lm_weight=0.3"]), *parts
    )
    message = f"decode.lm={tmp_path / 'lm.pt'}, which the model carries (las info), is not here"
    assert_clear_error(*run("decode", elsewhere, exported["data"])[::2], message)
    assert_clear_error(*run("decode", elsewhere, exported["data"])[::2], "without it with --set decode.lm_weight=0")
    assert run("decode", elsewhere, exported["data"], "--set", "decode.lm_weight=0")[0] == 0  # the LM unused
    no_lm = tmp_path / "no-lm"  # exported without its LM, its weight would ask for one in every decoding
    failed = run("export", elsewhere, no_lm, "--set", "decode.lm=")
    assert_clear_error(*failed[::2], "decode.lm_weight > 0 needs a language model")
    assert not no_lm.exists()
    assert run("export", elsewhere, no_lm, "--set", "decode.lm=", "--set", "decode.lm_weight=0")[0] == 0
    assert run("decode", no_lm, exported["data"])[0] == 0


def test_a_second_export_into_a_busy_folder_is_refused_and_one_cut_short_is_redone(
    exported: dict[str, Path], tmp_path: Path
) -> None:
    from las.core.files import locked_directory

    out = copy_of(exported["fp32"], tmp_path / "out")
    with locked_directory(out):  # another process exporting into it now
        assert_clear_error(*run("export", exported["checkpoint"], out)[::2], "in use by another las process")
    (out / "model.json").unlink()  # as an export killed before its last file leaves the folder
    (out / "speller_step.onnx").write_bytes(b"half")
    code, _, stderr = run("export", exported["checkpoint"], out)
    assert code == 0, stderr
    assert not (out / ".lock").exists()  # a folder ready to ship carries no lock file
    assert run("decode", out, exported["data"])[0] == 0
    (out / "notes.txt").write_text("mine")
    assert_clear_error(*run("export", exported["checkpoint"], out)[::2], "a folder with other files in it (notes.txt)")


def test_without_onnx_runtime_exporting_names_the_extra(
    exported: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as where it is not installed
    assert_clear_error(*run("export", exported["checkpoint"], tmp_path / "out")[::2], "pip install 'las[export]'")
    with pytest.raises(Exception, match=r"las\[export\]"):
        export(load_model(exported["checkpoint"]), tmp_path / "out2")


def test_a_listener_with_stacked_frames_trains_decodes_and_exports(tmp_path: Path) -> None:
    """model.frame_stacking: the pyramid's first reduction made by stacking frames before the
    first BLSTM, the same 4x to the speller and the CTC head; trained, decoded with word times,
    and exported, its listener graph giving what the model gives."""
    from las.core.config import load_config
    from las.training.train import train

    from .conftest import TINY, an4_rows, write_manifest

    manifest = write_manifest(tmp_path / "train.tsv", an4_rows("train", 2, longest_seconds=1.6))
    settings = [*TINY, "model.pyramid_layers=1", "model.frame_stacking=2", f"data.train={manifest}"]
    settings += [f"data.dev={manifest}", f"data.cache_dir={tmp_path / 'cache'}", f"train.out={tmp_path / 'run'}"]
    run_directory = train(load_config(None, [*settings, "train.epochs=1", "data.batch_size=2"]))
    checkpoint = run_directory / "last.pt"
    model = load_model(checkpoint).build_model()
    assert model.listener.reduction == 4 and model.listener.input_layer.forward_lstm.input_size == 2 * 80
    results = Recognizer(load_model(checkpoint), "cpu", ["decode.word_times=ctc"]).transcribe(manifest)
    assert len(results) == 2 and all(0 <= word.start <= word.end for result in results for word in result.words)
    code, _, stderr = run("export", checkpoint, tmp_path / "exported")
    assert code == 0, stderr
    graphs = load_model(tmp_path / "exported").build_model()
    features, lengths = torch.randn(3, 41, model.input_size), torch.tensor([41, 18, 7])
    with torch.no_grad():
        expected = model.listener(features, lengths)
    found = graphs.listener(features, lengths)
    assert torch.equal(found.lengths, expected.lengths) and found.lengths.tolist() == [11, 5, 2]
    for name in ("keys", "values", "hidden"):
        assert torch.allclose(getattr(found, name), getattr(expected, name), atol=1e-4), name


def test_an_export_carries_the_files_its_decoding_names(exported: dict[str, Path], tmp_path: Path) -> None:
    """An export made with a lexicon (or an LM) decodes with its own copy wherever it is taken."""
    data = exported["data"]
    words = tmp_path / "words.txt"  # the training transcripts' words but the first
    words.write_text("".join(f"{word}\n" for word in sorted(transcript_words(data))[1:]))
    settings = ["decode.strategy=beam", "decode.lexicon=" + str(words)]
    expected = [result.text for result in Recognizer(load_model(exported["fp32"]), "cpu", settings).transcribe(data)]
    out = tmp_path / "with-lexicon"
    code, _, stderr = run("export", exported["checkpoint"], out, *(part for s in settings for part in ("--set", s)))
    assert code == 0, stderr
    assert (out / "lexicon.txt").read_bytes() == words.read_bytes()
    words.unlink()  # gone from where it was: the export decodes with its copy, moved or not
    moved = copy_of(out, tmp_path / "moved")
    model = load_model(moved)
    assert model.decoding_config().decode.lexicon == str(moved / "lexicon.txt")
    assert [result.text for result in Recognizer(model, "cpu", []).transcribe(data)] == expected
    code, stdout, _ = run("info", moved)
    assert code == 0 and f"decode.lexicon={moved / 'lexicon.txt'}" in stdout
    (moved / "lexicon.txt").write_text("ANOTHER\nLIST\n")
    damaged = "damaged export: lexicon.txt is not the file that was exported"
    assert_clear_error(*run("decode", moved, data)[::2], damaged)
    code, _, stderr = run("export", exported["checkpoint"], out)  # exported again without it: the copy goes
    assert code == 0, stderr
    assert not (out / "lexicon.txt").exists() and load_model(out).decoding == ()
    message = f"decode.lm={tmp_path / 'lm.pt'}: no such file, and an export carries a copy of it"
    failed = run("export", exported["checkpoint"], tmp_path / "no-lm", "--set", f"decode.lm={tmp_path / 'lm.pt'}")
    assert_clear_error(*failed[::2], message)
    assert not (tmp_path / "no-lm").exists()


def test_an_export_exported_again_keeps_its_graphs_and_takes_new_decoding(
    exported: dict[str, Path], tmp_path: Path
) -> None:
    """A shipped export takes its user's lexicon or LM, without the checkpoint it was made from."""
    data = exported["data"]
    words = tmp_path / "words.txt"  # the training transcripts' words but the first
    words.write_text("".join(f"{word}\n" for word in sorted(transcript_words(data))[1:]))
    settings = ["decode.strategy=beam", f"decode.lexicon={words}"]
    expected = [result.text for result in Recognizer(load_model(exported["int8"]), "cpu", settings).transcribe(data)]
    out = tmp_path / "again"
    code, _, stderr = run("export", exported["int8"], out, *(part for s in settings for part in ("--set", s)))
    assert code == 0, stderr
    graphs = json.loads((exported["int8"] / "model.json").read_text())["graphs"]
    assert all((out / graph).read_bytes() == (exported["int8"] / graph).read_bytes() for graph in graphs)
    model = load_model(out)
    assert model.decoding_config().decode.lexicon == str(out / "lexicon.txt")
    assert [result.text for result in Recognizer(model, "cpu", []).transcribe(data)] == expected
    code, stdout, _ = run("info", out)
    assert code == 0 and "ONNX graphs (int8)" in stdout and "epoch" in stdout  # what it was trained, as before
    code, _, stderr = run("export", out, tmp_path / "third", "--set", "decode.beam_size=3")  # its own copy travels
    assert code == 0, stderr
    third = load_model(tmp_path / "third").decoding_config().decode
    assert third.lexicon == str(tmp_path / "third" / "lexicon.txt") and third.beam_size == 3
    assert (tmp_path / "third" / "lexicon.txt").read_bytes() == words.read_bytes()
    code, _, stderr = run("export", exported["fp32"], tmp_path / "quantized", "--quantize", "int8")
    assert code == 0, stderr
    quantized = tmp_path / "quantized"
    assert all((quantized / graph).read_bytes() == (exported["int8"] / graph).read_bytes() for graph in graphs)
    assert_clear_error(*run("export", out, out, "--set", "decode.beam_size=2")[::2], "the export being read")
    assert load_model(out).decoding_config().decode.beam_size != 2  # refused before anything was written
    source = load_model(out)
    (out / "speller_step.onnx").write_bytes(b"changed after it was read")
    with pytest.raises(LasError, match="damaged export: speller_step.onnx is not the file that was exported"):
        export(source, tmp_path / "fourth")
    assert not (tmp_path / "fourth" / "model.json").exists()  # no export there to decode
