from pathlib import Path

import pytest

from las.core.config import Config, DecodeConfig, load_config
from las.core.errors import LasError


def test_overrides_are_typed_and_leave_other_fields_alone() -> None:
    config = load_config(
        None, ["model.attention=dot", "train.epochs=3", "train.learning_rate=0.01", "model.tie_embedding=true"]
    )
    assert config.model.attention == "dot"
    assert config.train.epochs == 3 and isinstance(config.train.epochs, int)
    assert config.train.learning_rate == 0.01
    assert config.model.tie_embedding is True
    assert config.model.listener_hidden == Config().model.listener_hidden


def test_toml_file_then_set_overrides(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('[model]\nattention = "scaled_dot"\npyramid_layers = 4\n[train]\nepochs = 7\n')
    config = load_config(path, ["train.epochs=9"])
    assert (config.model.attention, config.model.pyramid_layers, config.train.epochs) == ("scaled_dot", 4, 9)


def test_round_trip_through_dict() -> None:
    config = load_config(None, ["model.key_dim=64"])
    assert Config.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("model.no_such_field=1", "unknown config key 'model.no_such_field'"),
        ("nosection.x=1", "unknown config key 'nosection'"),
        ("train.epochs=many", "expected int"),
        ("model.tie_embedding=maybe", "expected bool"),
        ("train.epochs", "expected KEY=VALUE"),
        ("decode.stream_trigger_lookahead_seconds=soon", "expected a number or 'auto'"),
        ("decode.stream_trigger_lookahead_seconds=3", "expected a number >= 0 and <= 2"),
    ],
)
def test_bad_overrides_are_clear_errors(assignment: str, message: str) -> None:
    with pytest.raises(LasError, match=message):
        load_config(None, [assignment])


def test_a_number_or_auto_resolves_auto_from_the_other_settings(tmp_path: Path) -> None:
    """The stream's trigger look-ahead: auto is 0 where the second pass gives the final words,
    0.16 s where the search's own are final; a number, from `--set` or TOML, is kept as given."""
    assert load_config(None, []).decode.stream_trigger_lookahead_seconds == "auto"
    assert load_config(None, []).decode.stream_lookahead == 0.0
    assert load_config(None, ["decode.stream_second_pass=false"]).decode.stream_lookahead == 0.16
    given = load_config(None, ["decode.stream_trigger_lookahead_seconds=0.08"]).decode
    assert given.stream_trigger_lookahead_seconds == 0.08 and given.stream_lookahead == 0.08
    path = tmp_path / "run.toml"
    path.write_text("[decode]\nstream_trigger_lookahead_seconds = 0\nstream_second_pass = false\n")
    assert load_config(path).decode.stream_lookahead == 0.0
    path.write_text("[decode]\nstream_trigger_lookahead_seconds = true\n")
    with pytest.raises(LasError, match="expected a number or 'auto'"):
        load_config(path)
    assert Config.from_dict(load_config(None, []).to_dict()).decode.stream_trigger_lookahead_seconds == "auto"
    for wrong in (True, "soon"):  # built in Python, not parsed: refused all the same
        with pytest.raises(LasError, match="is not one of auto, or a number"):
            DecodeConfig(stream_trigger_lookahead_seconds=wrong)  # type: ignore[arg-type]


def test_missing_and_invalid_toml(tmp_path: Path) -> None:
    with pytest.raises(LasError, match="config file not found"):
        load_config(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\n")
    with pytest.raises(LasError, match="invalid TOML"):
        load_config(bad)


DATA = Path(__file__).parent.parent / "data"
RECIPES = sorted([*(DATA / "recipes").glob("*.toml"), *DATA.glob("*/recipe.toml"), *(DATA / "an4").glob("*.toml")])


@pytest.mark.parametrize("recipe", RECIPES, ids=[f"{path.parent.name}/{path.stem}" for path in RECIPES])
def test_every_shipped_recipe_loads_and_changes_the_defaults(recipe: Path) -> None:
    config = load_config(recipe)
    assert config != Config()
    assert Config.from_dict(config.to_dict()) == config


def test_the_gpu_recipe_is_refused_on_the_cpu_in_one_line() -> None:
    with pytest.raises(LasError, match="needs a CUDA device"):
        load_config(DATA / "an4" / "gpu.toml", ["train.device=cpu"])


def test_a_retired_setting_at_its_old_default_is_ignored_with_a_note_and_refused_otherwise(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settings files and runs of earlier releases name settings measured as no help and taken
    out: at the value they had by default they change nothing, and load with one note a process;
    at another they ask for what is gone."""
    from las.core import config as config_module

    monkeypatch.setattr(config_module, "_noted", set())
    config = load_config(None, ["train.attention_guide=off", "decode.stream_second_pass_words_beam_size=0"])
    assert config == Config()
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "ignored at their old defaults: train.attention_guide, decode.stream" in said
    load_config(None, ["train.attention_guide=off"])
    assert capsys.readouterr().err == ""  # noted once
    for assignment in ("train.attention_guide=on", "train.attention_pieces_ctc_weight=0.8"):
        with pytest.raises(LasError, match=f"{assignment.split('=')[0]}' is no longer a setting.*got '"):
            load_config(None, [assignment])
    # Renamed: read under the new name.
    assert load_config(None, ["train.attention_guide_trigger=2"]).train.attention_pieces_trigger == 2.0


def test_a_checkpoint_of_an_earlier_release_with_retired_settings_loads_at_their_defaults(tmp_path: Path) -> None:
    import torch

    from las.model.checkpoint import load_checkpoint as load_model

    payload = torch.load(Path(__file__).parent / "data" / "search" / "model.pt", weights_only=False)
    retired = {"attention_guide": "off", "attention_guide_steps": 2000, "attention_pieces_quiet_seconds": 0.0}
    payload["config"]["train"] |= retired | {"attention_guide_trigger": 1.5}
    payload["config"]["decode"]["stream_second_pass_words_other_speed"] = True
    torch.save(payload, tmp_path / "old.pt")
    assert load_model(tmp_path / "old.pt").config.train.attention_pieces_trigger == 1.5
    payload["config"]["train"]["attention_guide"] = "on"
    torch.save(payload, tmp_path / "guided.pt")
    with pytest.raises(LasError, match=r"guided.pt: config key 'train.attention_guide' is no longer") as error:
        load_model(tmp_path / "guided.pt")
    assert "damaged" not in str(error.value)


def test_frame_stacking_is_a_pblstm_listeners_and_counts_in_the_reduction() -> None:
    assert load_config(None, ["model.frame_stacking=2", "model.pyramid_layers=1"]).model.reduction == 4
    assert Config().model.reduction == 4
    for listener in ("plstm", "conformer"):
        with pytest.raises(LasError, match="model.frame_stacking"):
            load_config(None, ["model.frame_stacking=2", f"model.listener={listener}"])
