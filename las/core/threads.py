"""CPU threads: as many as this process may really use, and no more than the machine's other
processes leave idle.

OpenMP threads that wait by spinning hold their core between parallel regions. On a machine where
other processes want the cores too (shared servers, Colab, CI) they take turns with them, and
every parallel region waits for the slowest: an AN4 epoch beside one busy process took 3x its idle
time. Threads that sleep instead (OMP_WAIT_POLICY=PASSIVE) do not collapse, but waking them costs
1.2-1.7x on an idle machine, where the listener's LSTMs open a parallel region per time step. So
the command line follows the load instead (`LoadFollower`): every few seconds it counts the cores
the other processes kept busy and uses the rest (at least one thread), which lets idle threads
spin. Where it cannot read the load (not Linux) the passive policy stays. The policy must be in
the environment before torch starts its thread pool, so the command line sets it first thing; a
value the user set stays.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_QUOTA = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"
CPU_TIMES = Path("/proc/stat")  # per CPU: jiffies spent user, nice, system, idle, iowait, irq, softirq, steal
FOLLOW_SECONDS = 2.0  # how often the thread count follows the load


def wait_passively() -> None:
    """OMP_WAIT_POLICY=PASSIVE unless set, where the load cannot be followed: call before torch is
    imported."""
    if busy_seconds(affinity()) is None:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def affinity() -> set[int]:
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def available_cores() -> int:
    """Cores this process may run on: its CPU affinity, within its container's CPU quota."""
    cores = len(affinity())
    try:
        quota, period = CGROUP_QUOTA.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota to honour
    return cores


def use_threads(count: int | None) -> int:
    """Torch's intra-op threads: `count` at most; else OMP_NUM_THREADS where the user set it (then
    fixed); else all available cores at most. Below the most, while other processes keep cores
    busy (`follow_load`). Returns the most."""
    import torch

    global follower
    follower = None
    if count is None and os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    threads = count or available_cores()
    torch.set_num_threads(threads)
    if busy_seconds(affinity()) is not None:
        follower = LoadFollower(threads)
    return threads


def busy_seconds(cpus: set[int]) -> float | None:
    """Seconds the CPUs `cpus` have been busy since boot, everyone's work together (Linux's
    /proc/stat: all but idle and waiting for I/O, steal included); None where unknown."""
    try:
        lines = CPU_TIMES.read_text().splitlines()
    except OSError:
        return None
    jiffies = 0
    for line in lines:
        name, *fields = line.split()
        if name[3:].isdigit() and name.startswith("cpu") and int(name[3:]) in cpus:
            times = [int(value) for value in fields[:8]]
            jiffies += sum(times) - times[3] - times[4]
    return jiffies / os.sysconf("SC_CLK_TCK")


def threads_for(other_cores: float, most: int) -> int:
    """Threads for the cores that other processes leave idle, rounded: 1 to `most`."""
    return max(1, min(most, round(most - other_cores)))


@dataclass
class LoadFollower:
    """Sets torch's threads to the cores other processes left idle over the last FOLLOW_SECONDS
    (`threads_for`): the machine's busy time less this process's own."""

    most: int
    cpus: set[int] = field(default_factory=affinity)
    last: tuple[float, float, float] = field(init=False)  # wall, machine busy and own CPU seconds

    def __post_init__(self) -> None:
        self.last = (time.monotonic(), busy_seconds(self.cpus) or 0.0, time.process_time())

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self.last[0] < FOLLOW_SECONDS:
            return
        busy, own = busy_seconds(self.cpus) or 0.0, time.process_time()
        others = ((busy - self.last[1]) - (own - self.last[2])) / (now - self.last[0])
        self.last = (now, busy, own)
        import torch

        threads = threads_for(others, self.most)
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)


follower: LoadFollower | None = None  # set by `use_threads` on the command line


def follow_load() -> None:
    """Between steps or batches: the thread count follows the machine's load (a no-op outside
    the command line, or when the user fixed OMP_NUM_THREADS)."""
    if follower is not None:
        follower()
