"""Threads: as many as the process may use and other processes leave idle, the user's choice first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from las.core import threads

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
        assert threads.follower is not None and threads.follower.most == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert threads.use_threads(None) == torch.get_num_threads() == 1  # the user's setting stays
        assert threads.follower is None  # and is not changed with the load
        monkeypatch.delenv("OMP_NUM_THREADS")
        assert threads.use_threads(None) == threads.available_cores()
    finally:
        torch.set_num_threads(before)


def test_waiting_threads_sleep_where_the_load_cannot_be_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    threads.wait_passively()
    assert "OMP_WAIT_POLICY" not in os.environ  # Linux: the load is followed, idle threads may spin
    monkeypatch.setattr(threads, "CPU_TIMES", tmp_path / "missing")
    threads.wait_passively()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    threads.wait_passively()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"  # the user's choice stays


def test_threads_are_the_cores_other_processes_leave_idle() -> None:
    assert [threads.threads_for(others, 2) for others in (0.0, 0.4, 0.6, 1.0, 3.0)] == [2, 2, 1, 1, 1]
    assert threads.threads_for(0.0, 1) == 1 and threads.threads_for(2.2, 8) == 6


def test_the_thread_count_follows_the_machines_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/stat as the kernel writes it: one busy process appears, then goes."""
    stat = tmp_path / "stat"
    monkeypatch.setattr(threads, "CPU_TIMES", stat)
    clock = {"wall": 0.0, "own": 0.0, "busy": 0}  # busy: jiffies of CPUs 0-1 (100 a second)

    def write() -> None:
        half = clock["busy"] // 2
        stat.write_text(f"cpu  1 2 3 4\ncpu0 {half} 0 0 500 0 0 0 0\ncpu1 {clock['busy'] - half} 0 0 500 0 0 0 0\n")

    def advance(seconds: float, others: float, own: float) -> None:
        clock["wall"] += seconds
        clock["own"] += own * seconds
        clock["busy"] += round(100 * (others + own) * seconds)
        write()

    monkeypatch.setattr(threads.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(threads.time, "process_time", lambda: clock["own"])
    monkeypatch.setattr(threads.os, "sysconf", lambda name: 100)
    write()
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        follower = threads.LoadFollower(2, {0, 1})
        advance(1.0, others=1.0, own=1.0)
        follower()
        assert torch.get_num_threads() == 2  # not due yet: FOLLOW_SECONDS have not passed
        advance(2.0, others=1.0, own=1.0)
        follower()
        assert torch.get_num_threads() == 1  # a core taken by another process over the last 3 s
        advance(3.0, others=0.0, own=1.0)
        follower()
        assert torch.get_num_threads() == 2  # and given back
    finally:
        torch.set_num_threads(before)


def test_threads_option(trained_run: dict[str, Path]) -> None:
    before = torch.get_num_threads()
    try:
        code, stdout, _ = run("--threads", "1", "info", trained_run["run"] / "best.pt")
        assert code == 0 and "parameters" in stdout and torch.get_num_threads() == 1
        code, _, stderr = run("--threads", "0", "info", trained_run["run"] / "best.pt")
        assert code != 0 and "--threads" in stderr
    finally:
        torch.set_num_threads(before)
