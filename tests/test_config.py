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


RECIPES = sorted((Path(__file__).parent.parent / "data" / "recipes").glob("*.toml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=[path.stem for path in RECIPES])
def test_every_shipped_recipe_loads_and_changes_the_defaults(recipe: Path) -> None:
    config = load_config(recipe)
    assert config != Config()
    assert Config.from_dict(config.to_dict()) == config


def test_the_gpu_recipe_is_refused_on_the_cpu_in_one_line() -> None:
    with pytest.raises(LasError, match="needs a CUDA device"):
        load_config(RECIPES[0].parent / "an4-gpu.toml", ["train.device=cpu"])
