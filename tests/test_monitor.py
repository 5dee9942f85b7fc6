"""Watching a run: TensorBoard event files, Weights & Biases, progress lines for batch jobs."""

from __future__ import annotations

import json
import shutil
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from las.core.config import Config
from las.recognition.plots import run_labels, runs_figure
from las.training.monitor import duration
from las.training.train import train

from .conftest import assert_clear_error, run


def with_training(config: Config, **settings: object) -> Config:
    return replace(config, train=replace(config.train, **settings))


def test_tensorboard_holds_the_losses_dev_figures_attention_transcripts_and_settings(tiny_config: Config) -> None:
    out = train(with_training(tiny_config, epochs=2, log_every=1))
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"images": 0, "scalars": 0, "tensors": 0})
    events.Reload()
    tags = events.Tags()
    steps_per_epoch = 1  # four utterances, batches of four
    for name in ("loss", "attention_loss", "ctc_loss", "learning_rate", "teacher_forcing", "gradient_norm"):
        assert [event.step for event in events.Scalars(f"train/{name}")] == [1, 2], name
    assert all(event.value > 0 for event in events.Scalars("train/frames_per_second"))
    for name in ("cer", "wer", "diagonal_share"):
        assert [event.step for event in events.Scalars(f"dev/{name}")] == [steps_per_epoch, 2 * steps_per_epoch]
    assert [event.step for event in events.Images("dev/attention")] == [1, 2]
    transcripts = [tag for tag in tags["tensors"] if tag.startswith("dev/transcripts")]
    text = events.Tensors(transcripts[0])[-1].tensor_proto.string_val[0].decode()
    assert text.startswith("| id | reference | hypothesis |") and len(text.splitlines()) == 2 + 2  # 2 dev utterances
    assert any(tag.startswith("config") for tag in tags["tensors"])
    assert events.Scalars("hparam/best_dev_cer")[-1].value >= 0  # with the run's settings (HPARAMS)
    assert "_hparams_/experiment" in str(events.summary_metadata)


def test_no_event_files_when_tensorboard_is_off(tiny_config: Config) -> None:
    out = train(with_training(tiny_config, epochs=1, tensorboard=False))
    assert not (out / "tensorboard").exists()


def test_batch_job_logs_show_progress_between_epochs(tiny_config: Config, tmp_path: Path) -> None:
    settings = ["--set", "train.log_every=1", "--set", f"data.cache_dir={tmp_path / 'cache'}"]
    train_manifest = tiny_config.data.train
    code, stdout, stderr = run(
        "train", "--train", train_manifest, "--dev", tiny_config.data.dev, "--out", tmp_path / "job", "--epochs", "2",
        *[item for assignment in _tiny() for item in ("--set", assignment)], *settings,
    )  # fmt: skip
    assert code == 0, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("epoch ") and " step " in line]
    assert [line.split()[5] for line in lines] == ["1/2", "2/2"]  # step/total, stderr not a terminal
    assert all(" loss " in line and " lr " in line and "frames/s" in line and " ETA " in line for line in lines)


def _tiny() -> list[str]:
    from .conftest import TINY

    return [*TINY, "data.batch_size=4"]


def test_weights_and_biases_when_asked(tiny_config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, list] = {"init": [], "log": [], "finish": []}
    fake = types.SimpleNamespace(
        init=lambda **options: calls["init"].append(options),
        log=lambda values, step: calls["log"].append((step, values)),
        finish=lambda: calls["finish"].append(True),
        summary={},
        Table=lambda columns, data: ("table", columns, data),
        Image=lambda figure: ("image", figure),
    )
    monkeypatch.setitem(sys.modules, "wandb", fake)
    train(with_training(tiny_config, epochs=2, log_every=1, wandb_project="las-test", tensorboard=False))
    assert calls["init"][0]["project"] == "las-test" and calls["finish"] == [True]
    logged = {name for _, values in calls["log"] for name in values}
    assert {"train/loss", "train/learning_rate", "dev/cer", "dev/wer", "dev/transcripts", "dev/attention"} <= logged
    assert fake.summary["best_dev_cer"] >= 0
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    code, _, stderr = run(
        "train", "--train", tiny_config.data.train, "--out", tmp_path / "no-wandb", "--set", "train.wandb_project=x"
    )
    assert_clear_error(code, stderr, "train.wandb_project=x needs the wandb package: pip install wandb")


def test_durations_read_well() -> None:
    assert [duration(seconds) for seconds in (42, 185, 3725)] == ["42s", "3m05s", "1h02m"]


def test_las_plot_compares_runs(tiny_config: Config, tmp_path: Path) -> None:
    runs = [
        train(with_training(tiny_config, epochs=2, tensorboard=False, learning_rate=rate, out=str(tmp_path / name)))
        for rate, name in ((5e-3, "fast"), (1e-3, "slow"))
    ]
    figure = tmp_path / "figures" / "runs.png"
    code, _, stderr = run("plot", *runs, "--out", figure)
    assert code == 0, stderr
    assert figure.read_bytes().startswith(b"\x89PNG") and figure.stat().st_size > 20_000
    assert run_labels(runs) == ["fast (train.learning_rate=0.005)", "slow (train.learning_rate=0.001)"]
    # Each run's speller and, dashed in its colour, its CTC head on dev.
    lines = runs_figure(runs).axes[2].get_lines()
    assert [(line.get_color(), line.get_linestyle()) for line in lines] == [
        ("C0", "-"),
        ("C0", "--"),
        ("C1", "-"),
        ("C1", "--"),
    ]
    assert all(len(line.get_xdata()) == 2 for line in lines)  # one point an epoch
    # A run saved before a setting existed ran as its default: not a difference.
    saved = json.loads((runs[1] / "config.json").read_text())
    del saved["train"]["attention_pieces"]
    saved["train"]["a_removed_setting"] = 3  # one las no longer has: not a difference either
    (runs[1] / "config.json").write_text(json.dumps(saved))
    assert run_labels(runs) == ["fast (train.learning_rate=0.005)", "slow (train.learning_rate=0.001)"]
    # Runs of one name in different folders are told apart by their folders.
    twin = tmp_path / "other" / "fast"
    shutil.copytree(runs[0], twin)
    assert run_labels([runs[0], twin]) == [f"{tmp_path.name}/fast", "other/fast"]
    assert_clear_error(*run("plot", tmp_path, "--out", figure)[::2], "no metrics.jsonl")
