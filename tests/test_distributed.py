"""Data-parallel training: two gloo processes launched by torchrun learn what one process learns."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from las.export.runtime import load_model
from las.training.distributed import Distributed
from tests.conftest import TINY, an4_rows, write_manifest


def test_shards_split_a_batch_between_ranks() -> None:
    batch = [7, 3, 9, 4, 1]
    shards = [Distributed(rank, 2).shard(batch) for rank in range(2)]
    assert shards == [[7, 9, 1], [3, 4]]
    assert Distributed().shard(batch) == batch and not Distributed().enabled


def train_command(processes: int) -> list[str]:
    if processes == 1:
        return [sys.executable, "-m", "las", "train"]
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    return [sys.executable, *launcher, "-m", "las", "train"]


def run_training(
    tmp_path: Path, processes: int, extra: tuple[str, ...] = (), name: str = "", resume: bool = False
) -> Path:
    out = tmp_path / (name or f"run_{processes}")
    manifest = write_manifest(tmp_path / "train.tsv", an4_rows("train", 8, longest_seconds=2.0))
    settings = TINY + [
        f"data.train={manifest}",
        f"data.dev={manifest}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.batch_size=4",
        "train.epochs=3",
        "train.learning_rate=5e-3",
        *extra,
    ]
    arguments = [item for setting in settings for item in ("--set", setting)]
    # One thread per process: two processes on two cores, and sums in a fixed order.
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [*train_command(processes), "--out", str(out), *arguments, *(["--resume"] if resume else [])],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-8000:]
    return out


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="torch built without gloo")
def test_two_gloo_processes_follow_the_single_process_trajectory(tmp_path: Path) -> None:
    single, double = run_training(tmp_path, 1), run_training(tmp_path, 2)
    records = [metrics(run) for run in (single, double)]
    assert [record["epoch"] for record in records[1]] == [1, 2, 3]
    for one, two in zip(*records, strict=True):
        for key in ("train_loss", "train_attention_loss", "train_ctc_loss"):
            assert two[key] == pytest.approx(one[key], rel=1e-4), key
        assert two["step"] == one["step"] and two["train_frames_per_second"] > 0
    # Same gradients every step, so the same weights at the end.
    weights = [load_model(run / "last.pt").model_state for run in (single, double)]
    for name, value in weights[0].items():
        torch.testing.assert_close(weights[1][name], value, rtol=1e-3, atol=1e-4, msg=name)
    # Rank 0 alone wrote the run: one metrics line per epoch, one attention plot per epoch.
    assert len(list((double / "attention").glob("*.png"))) == 3


# Every draw that differs between ranks: dropout, sampled teacher forcing and SpecAugment masks.
RANDOM = ("model.dropout=0.2", "train.teacher_forcing_final=0.5", "train.teacher_forcing_decay_epochs=1")
RANDOM += ("train.specaugment_start_epoch=0", "train.final_learning_rate_scale=1.0", "train.average_best=0")


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="torch built without gloo")
def test_two_processes_resume_bit_exactly_with_every_ranks_random_state(tmp_path: Path) -> None:
    # A constant learning rate after warm-up, so that extending the run from 1 to 2 epochs leaves
    # the schedule alone: what must carry over is every rank's random state and the optimizer.
    straight = run_training(tmp_path, 2, (*RANDOM, "train.epochs=2"), name="straight")
    split = run_training(tmp_path, 2, (*RANDOM, "train.epochs=1"), name="split")
    ranks = load_model(split / "last.pt").training_state["progress"]["rng"]["ranks"]
    assert len(ranks) == 2 and not torch.equal(ranks[0]["torch"], ranks[1]["torch"])
    run_training(tmp_path, 2, (*RANDOM, "train.epochs=2"), name="split", resume=True)
    weights = [load_model(run / "last.pt").model_state for run in (straight, split)]
    for name, value in weights[0].items():
        torch.testing.assert_close(weights[1][name], value, rtol=0, atol=0, msg=name)
    timings = ("seconds", "elapsed_seconds", "train_frames_per_second", "peak_memory_mb")
    records = [[{k: v for k, v in r.items() if k not in timings} for r in metrics(run)] for run in (straight, split)]
    assert records[0] == records[1]


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="torch built without gloo")
def test_two_processes_train_in_pieces_with_utterances_heard_whole_by_the_ctc_head(tmp_path: Path) -> None:
    # Each rank cuts its own utterances, and hears whole those its CTC head does not yet align (a
    # second forward pass before the one backward), whether or not the other rank does: the ranks
    # must stay in step through DistributedDataParallel's reduction all the same.
    pieces = ("train.attention_pieces=on", "train.attention_pieces_seconds=0.5", "train.attention_pieces_trigger=7")
    records = metrics(run_training(tmp_path, 2, pieces))
    assert [record["epoch"] for record in records] == [1, 2, 3]
    assert all(record["train_cut"] > 0 for record in records)
    assert any(0 < record["train_heard"] < 1 for record in records)
