"""Threads: as many as the process may use, waiting passively, the user's choice first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from las import threads

from .conftest import run


def test_available_cores_honour_affinity_and_the_container_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    affinity = len(os.sched_getaffinity(0))
    quota = tmp_path / "cpu.max"
    monkeypatch.setattr(threads, "CGROUP_QUOTA", quota)
    assert threads.available_cores() == affinity  # no quota file
    quota.write_text("max 100000\n")
    assert threads.available_cores() == affinity
    quota.write_text("50000 100000\n")  # half a core: one thread
    assert threads.available_cores() == 1
    quota.write_text("150000 100000\n")
    assert threads.available_cores() == min(affinity, 2)


def test_threads_follow_the_option_then_omp_num_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    try:
        assert threads.use_threads(1) == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert threads.use_threads(None) == torch.get_num_threads() == 1  # the user's setting stays
        monkeypatch.delenv("OMP_NUM_THREADS")
        assert threads.use_threads(None) == threads.available_cores()
    finally:
        torch.set_num_threads(before)


def test_waiting_threads_sleep_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    threads.wait_passively()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    threads.wait_passively()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_threads_option(trained_run: dict[str, Path]) -> None:
    before = torch.get_num_threads()
    try:
        code, stdout, _ = run("--threads", "1", "info", trained_run["run"] / "best.pt")
        assert code == 0 and "parameters" in stdout and torch.get_num_threads() == 1
        code, _, stderr = run("--threads", "0", "info", trained_run["run"] / "best.pt")
        assert code != 0 and "--threads" in stderr
    finally:
        torch.set_num_threads(before)
