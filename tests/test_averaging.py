import json
from pathlib import Path

import pytest
import torch

from las.averaging import average_states, rank_snapshots
from las.checkpoint import load_checkpoint


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
    averaged = load_checkpoint(run / "averaged.pt")
    states = [torch.load(path, weights_only=True) for path in snapshots]
    for name, value in averaged.model_state.items():
        assert torch.allclose(value, sum(state[name] for state in states) / len(states), atol=1e-6), name
    assert averaged.config == load_checkpoint(run / "best.pt").config
