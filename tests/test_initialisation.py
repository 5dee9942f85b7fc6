"""Fine-tuning: `las train --init CHECKPOINT` starts from a trained model's weights, keeps the
rows of the characters both vocabularies share, freezes parts on request, and refuses a model
its weights cannot fit in one line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from las.core.config import load_config
from las.core.errors import LasError
from las.core.text import Vocabulary
from las.export.runtime import load_model
from las.model.las import LAS
from las.training.initialisation import CHARACTER_ROWS, initialise

from .conftest import TINY, an4_rows, assert_clear_error, run, write_manifest


def new_speakers(tmp_path: Path) -> Path:
    """Other AN4 utterances, whose transcripts bring characters the trained run never saw."""
    return write_manifest(tmp_path / "adapt.tsv", an4_rows("train", 12, longest_seconds=1.6)[4:])


def settings(trained_run: dict[str, Path], tmp_path: Path, *extra: str, model: bool = True) -> list[str]:
    """The tiny run's settings for new speakers; without `model`, none of its model.* ones."""
    manifest = new_speakers(tmp_path)
    chosen = [assignment for assignment in TINY if model or not assignment.startswith("model.")] + [
        f"data.train={manifest}",
        f"data.dev={manifest}",
        f"data.cache_dir={trained_run['root'] / 'cache'}",
    ]
    chosen += ["data.batch_size=4", "train.epochs=2", f"train.out={tmp_path / 'run'}"]
    return [item for assignment in [*chosen, *extra] for item in ("--set", assignment)]


def test_every_weight_that_fits_is_loaded_and_shared_characters_keep_their_rows(trained_run: dict[str, Path]) -> None:
    trained = load_model(trained_run["run"] / "best.pt")
    vocabulary = trained.vocabulary.extended(["QZ9"])  # three new characters
    config = trained.config.model
    model = LAS.build(config, trained.input_size, len(vocabulary))
    lines = initialise(model, config, vocabulary, trained, "best.pt")
    state = model.state_dict()
    for name, weight in trained.model_state.items():
        if name in CHARACTER_ROWS:
            assert torch.equal(state[name][: len(trained.vocabulary)], weight)  # old symbols first, in order
            assert state[name].shape[0] == len(trained.vocabulary) + 3
        else:
            assert torch.equal(state[name], weight)
    assert lines[-1] == f"characters: {len(trained.vocabulary)} shared with the checkpoint, 3 new"
    assert any(line.startswith("listener: ") and "loaded" in line for line in lines)
    # Another order of the same symbols: rows follow the symbols, not the positions.
    shuffled = Vocabulary(trained.vocabulary.symbols[:4] + tuple(reversed(trained.vocabulary.symbols[4:])))
    model = LAS.build(config, trained.input_size, len(shuffled))
    initialise(model, config, shuffled, trained, "best.pt")
    embedding = model.state_dict()["speller.embedding.weight"]
    for position, symbol in enumerate(shuffled.symbols):
        assert torch.equal(
            embedding[position], trained.model_state["speller.embedding.weight"][trained.vocabulary.index[symbol]]
        )


def test_a_part_of_another_kind_starts_anew_and_the_rest_is_loaded(trained_run: dict[str, Path]) -> None:
    """A Transformer speller on the trained pBLSTM listener; a Transformer listener renews the
    CTC head that reads it, and keeps the speller."""
    trained = load_model(trained_run["run"] / "best.pt")
    assert trained.config.model.speller == "lstm" and trained.config.model.listener == "pblstm"
    for kind, renewed, why in [
        ("speller", {"speller"}, "speller: 31 initialised (model.speller=lstm there), 11 skipped"),
        ("listener", {"listener", "ctc_head"}, "listener: 108 initialised (model.listener=pblstm there), 24 skipped"),
    ]:
        config = dataclasses.replace(trained.config.model, **{kind: "transformer"}, transformer_dim=32)
        model = LAS.build(config, trained.input_size, len(trained.vocabulary))
        before = {name: weight.clone() for name, weight in model.state_dict().items()}
        lines = initialise(model, config, trained.vocabulary, trained, "best.pt")
        for name, weight in model.state_dict().items():
            expected = before[name] if name.split(".")[0] in renewed else trained.model_state[name]
            assert torch.equal(weight, expected), name
        assert any(line.startswith(why) for line in lines), lines
        with pytest.raises(LasError, match=f"train.freeze={kind}: the {kind} starts anew .* cannot be frozen"):
            initialise(model, config, trained.vocabulary, trained, "best.pt", frozen=(kind,))


def test_fine_tuning_is_the_checkpoints_model_and_features_where_nothing_names_others(
    trained_run: dict[str, Path], tmp_path: Path
) -> None:
    """No model.* setting given: the tiny model of the checkpoint, not the defaults' model, with
    every weight loaded. A speller of another kind named: it goes on the checkpoint's listener.
    A setting that only the checkpoint's kind of speller takes: taken, its kind not said again."""
    init = trained_run["run"] / "best.pt"
    trained = load_model(init)
    for kind, extra in [("lstm", ()), ("transformer", ("model.speller=transformer", "model.transformer_dim=32"))]:
        out = tmp_path / kind
        arguments = settings(trained_run, tmp_path, "train.epochs=1", f"train.out={out}", *extra, model=False)
        code, _, stderr = run("train", "--init", init, *arguments)
        assert code == 0, stderr
        tuned = load_model(out / "last.pt").config
        expected = trained.config.model
        if extra:
            expected = dataclasses.replace(expected, speller="transformer", transformer_dim=32)
        assert tuned.model == expected and tuned.features == trained.config.features
        parts = dict(line.split(": ", 2)[1:] for line in stderr.splitlines() if line.startswith(f"--init {init}: "))
        assert "initialised" not in parts["listener"] + parts["ctc_head"], parts
        assert ("initialised (model.speller=lstm there)" in parts["speller"]) == bool(extra), parts
    out = tmp_path / "its-width-said"  # its speller's width, said as only a Transformer speller takes it
    arguments = settings(
        trained_run, tmp_path, "train.epochs=1", f"train.out={out}", "model.speller_dim=32", model=False
    )
    code, _, stderr = run("train", "--init", tmp_path / "transformer" / "last.pt", *arguments)
    assert code == 0, stderr
    tuned_model = load_model(out / "last.pt").config.model
    assert (tuned_model.speller, tuned_model.speller_dim) == ("transformer", 32)
    assert "initialised" not in stderr, stderr  # every weight loaded


def test_a_letter_in_the_other_case_starts_from_the_checkpoints_rows(trained_run: dict[str, Path]) -> None:
    trained = load_model(trained_run["run"] / "best.pt")
    upper = [symbol for symbol in trained.vocabulary.symbols if symbol.isupper()]
    vocabulary = trained.vocabulary.extended([symbol.lower() for symbol in upper] + ["9"])
    config = trained.config.model
    model = LAS.build(config, trained.input_size, len(vocabulary))
    lines = initialise(model, config, vocabulary, trained, "best.pt")
    shared = len(trained.vocabulary)
    assert lines[-1] == (
        f"characters: {shared} shared with the checkpoint, {len(upper) + 1} new "
        f"({len(upper)} started from the same letter in the other case)"
    )
    state = model.state_dict()
    for name in CHARACTER_ROWS:
        for letter in upper:
            theirs = trained.model_state[name][trained.vocabulary.index[letter]]
            assert torch.equal(state[name][vocabulary.index[letter.lower()]], theirs)


def test_transcripts_that_share_no_character_with_the_checkpoint_are_refused(
    trained_run: dict[str, Path], tmp_path: Path
) -> None:
    init = trained_run["run"] / "best.pt"
    rows = [[*row[:3], "αβγ δ"] for row in an4_rows("train", 4, longest_seconds=1.6)]
    manifest = write_manifest(tmp_path / "greek.tsv", rows)
    arguments = [*settings(trained_run, tmp_path), "--set", f"data.train={manifest}"]
    code, _, stderr = run("train", "--init", init, *arguments)
    assert_clear_error(code, stderr, "its transcripts share no character with --init")
    assert not (tmp_path / "run" / "last.pt").exists()


def test_fine_tuning_keeps_the_normalisation_adds_characters_and_freezes_the_listener(
    trained_run: dict[str, Path], tmp_path: Path
) -> None:
    init = trained_run["run"] / "best.pt"
    code, _, stderr = run("train", "--init", init, *settings(trained_run, tmp_path, "train.freeze=listener"))
    assert code == 0, stderr
    assert f"--init {init}: listener: " in stderr and "new" in stderr
    trained, tuned = load_model(init), load_model(tmp_path / "run" / "last.pt")
    assert tuned.vocabulary.symbols[: len(trained.vocabulary)] == trained.vocabulary.symbols
    assert len(tuned.vocabulary) > len(trained.vocabulary)  # the new speakers' characters
    assert torch.equal(tuned.normalizer.mean, trained.normalizer.mean)
    listener = [name for name in trained.model_state if name.startswith("listener.")]
    assert all(torch.equal(tuned.model_state[name], trained.model_state[name]) for name in listener)
    assert not torch.equal(
        tuned.model_state["speller.cells.0.weight_hh"], trained.model_state["speller.cells.0.weight_hh"]
    )


def test_a_listener_frozen_for_one_epoch_moves_after_it(trained_run: dict[str, Path], tmp_path: Path) -> None:
    init = trained_run["run"] / "best.pt"
    extra = ("train.freeze=listener,ctc_head", "train.freeze_epochs=1")
    code, _, stderr = run("train", "--init", init, *settings(trained_run, tmp_path, *extra))
    assert code == 0, stderr
    trained, tuned = load_model(init), load_model(tmp_path / "run" / "last.pt")
    name = "listener.key.weight"
    assert not torch.equal(tuned.model_state[name], trained.model_state[name])


def test_a_model_the_weights_cannot_fit_is_one_clear_error(trained_run: dict[str, Path], tmp_path: Path) -> None:
    init = trained_run["run"] / "best.pt"
    code, _, stderr = run("train", "--init", init, *settings(trained_run, tmp_path, "model.speller_hidden=64"))
    assert_clear_error(code, stderr, "--init needs the same model settings and features")
    assert "model.speller_hidden=64 here, 96 there" in stderr
    code, _, stderr = run("train", "--init", tmp_path / "absent.pt", *settings(trained_run, tmp_path))
    assert_clear_error(code, stderr, "absent.pt")


def test_freezing_a_part_the_model_does_not_have_is_refused_when_the_config_is_made() -> None:
    with pytest.raises(LasError, match="'train.freeze': encoder is not one of listener, speller, ctc_head"):
        load_config(None, ["train.freeze=listener, encoder"])
    with pytest.raises(LasError, match="choose one place to start from"):
        load_config(None, ["train.init=a.pt", "train.speller_init=b.pt"])
