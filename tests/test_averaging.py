import json
import shutil
from pathlib import Path

import pytest
import torch

from las.core.errors import LasError
from las.export.runtime import load_model
from las.training.averaging import average_states, load_snapshots, rank_snapshots, snapshot_path

from .conftest import assert_clear_error
from .conftest import run as las


def test_ranking_keeps_the_lowest_cer_and_prefers_later_epochs_on_ties() -> None:
    kept, dropped = rank_snapshots([(30.0, 1), (20.0, 2)], (20.0, 3), 2)
    assert kept == [(20.0, 3), (20.0, 2)] and dropped == [(30.0, 1)]
    kept, dropped = rank_snapshots(kept, (40.0, 4), 2)
    assert kept == [(20.0, 3), (20.0, 2)] and dropped == [(40.0, 4)]


def test_average_is_the_element_wise_mean_of_floats() -> None:
    states = [
        {"weight": torch.tensor([1.0, 2.0]), "count": torch.tensor(3)},
        {"weight": torch.tensor([3.0, 6.0]), "count": torch.tensor(5)},
    ]
    averaged = average_states(states)
    assert torch.equal(averaged["weight"], torch.tensor([2.0, 4.0]))
    assert averaged["count"].item() == 3  # integers are not averaged
    with pytest.raises(ValueError):
        average_states([])


def test_snapshots_missing_or_damaged_are_left_out_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A run copied without its snapshots/ folder, or one whose snapshot broke, still averages the rest.
    for epoch in (3, 5, 8):
        snapshot_path(tmp_path, epoch).parent.mkdir(exist_ok=True)
        torch.save({"weight": torch.full((2,), float(epoch))}, snapshot_path(tmp_path, epoch))
    snapshot_path(tmp_path, 5).write_bytes(b"not a checkpoint")
    states = load_snapshots(tmp_path, [3, 5, 8, 13])
    assert sorted(states) == [3, 8]
    assert torch.equal(average_states(list(states.values()))["weight"], torch.tensor([5.5, 5.5]))
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 2 and all("averaged without it" in line for line in warnings)
    assert "epoch_005.pt" in warnings[0] and "epoch_013.pt" in warnings[1]


def test_training_keeps_the_best_epochs_and_writes_their_average(trained_run: dict[str, Path]) -> None:
    run = trained_run["run"]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    ranked = sorted(records, key=lambda record: (record["dev_cer"], -record["epoch"]))
    best_epochs = sorted(record["epoch"] for record in ranked[:5])
    snapshots = sorted(run.glob("snapshots/epoch_*.pt"))
    assert [int(path.stem.split("_")[1]) for path in snapshots] == best_epochs  # the others were deleted
    summary = json.loads((run / "averaged.json").read_text())
    assert summary["epochs"] == best_epochs
    assert summary["best_epoch_dev_cer"] == ranked[0]["dev_cer"]
    assert 0 <= summary["dev_cer"]
    averaged = load_model(run / "averaged.pt")
    states = [torch.load(path, weights_only=True) for path in snapshots]
    for name, value in averaged.model_state.items():
        assert torch.allclose(value, sum(state[name] for state in states) / len(states), atol=1e-6), name
    assert averaged.config == load_model(run / "best.pt").config


def test_an_epochs_snapshot_loads_as_a_model_with_its_runs_settings(
    trained_run: dict[str, Path], tmp_path: Path
) -> None:
    run = trained_run["run"]
    snapshot = sorted(run.glob("snapshots/epoch_*.pt"))[0]
    model = load_model(snapshot)  # what las decode and las info read
    best = load_model(run / "best.pt")
    assert model.config == best.config and model.decoding == best.decoding
    assert model.vocabulary.to_list() == best.vocabulary.to_list()
    state = torch.load(snapshot, weights_only=True)
    assert all(torch.equal(model.model_state[name], value) for name, value in state.items())
    assert model.training_state == {}
    model.build_model()  # the weights fit the run's model
    code, stdout, stderr = las("decode", snapshot, trained_run["train"], "--strategy", "greedy")
    assert code == 0 and stdout.count("\n") == 5, stderr  # the csv header and the four utterances
    assert las("info", snapshot)[0] == 0
    # The same weights away from their run have no settings to decode with: one line says where they belong.
    stray = tmp_path / "epoch_003.pt"
    stray.write_bytes(snapshot.read_bytes())
    with pytest.raises(LasError, match="a model's weights without its settings.*RUN/snapshots/"):
        load_model(stray)


def test_a_snapshot_its_run_does_not_list_is_refused(trained_run: dict[str, Path], tmp_path: Path) -> None:
    # A snapshot put by hand into a run whose model has the same shape would decode with that run's
    # vocabulary and normalisation, silently wrong: the run's last.pt lists the epochs it kept.
    run = shutil.copytree(trained_run["run"], tmp_path / "run")
    kept = sorted(run.glob("snapshots/epoch_*.pt"))
    stranger = run / "snapshots" / "epoch_099.pt"
    stranger.write_bytes(kept[0].read_bytes())
    with pytest.raises(LasError, match=r"not a snapshot its run kept \(.*last.pt lists epochs: \d"):
        load_model(stranger)
    code, _, stderr = las("decode", stranger, trained_run["train"])
    assert_clear_error(code, stderr, "not a snapshot its run kept")
    # Without last.pt nothing lists the run's latest snapshots: best.pt's settings decode them.
    (run / "last.pt").unlink()
    assert load_model(kept[-1]).config == load_model(run / "best.pt").config
