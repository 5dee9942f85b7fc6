"""CPU threads: as many as this process may really use, waiting for work without spinning.

OpenMP threads that wait by spinning hold their core between parallel regions; on a machine
where other processes want the cores too (shared servers, Colab, CI) they take turns with them
and every parallel region waits for the slowest. The passive policy makes waiting threads sleep.
It must be in the environment before torch starts its thread pool, so the command line sets it
first thing; a value the user set stays.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_QUOTA = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"


def wait_passively() -> None:
    """OMP_WAIT_POLICY=PASSIVE unless set: call before torch is imported."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def available_cores() -> int:
    """Cores this process may run on: its CPU affinity, within its container's CPU quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = CGROUP_QUOTA.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota to honour
    return cores


def use_threads(count: int | None) -> int:
    """Torch's intra-op threads: `count`; else OMP_NUM_THREADS where the user set it; else all
    available cores. Returns how many."""
    import torch

    if count is None and os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    threads = count or available_cores()
    torch.set_num_threads(threads)
    return threads
