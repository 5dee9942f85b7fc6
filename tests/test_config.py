from pathlib import Path

import pytest

from las.core.config import Config, load_config
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
    ],
)
def test_bad_overrides_are_clear_errors(assignment: str, message: str) -> None:
    with pytest.raises(LasError, match=message):
        load_config(None, [assignment])


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
