"""Data-parallel training across processes started by `torchrun` (one per GPU, or CPU processes).

torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; without them training is one process and every
method here is the identity. Ranks share the global batch list (same seed), each trains on its
slice of every batch, and DistributedDataParallel averages the gradients.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from las.core.device import resolve_device

Item = TypeVar("Item")


@dataclass(frozen=True)
class Distributed:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_environment(cls) -> Distributed:
        return cls(
            int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))
        )

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0 alone writes checkpoints, logs and plots."""
        return self.rank == 0

    def start(self, device_name: str) -> torch.device:
        """Join the process group (NCCL on GPUs, gloo on CPUs) and return this rank's device."""
        device = resolve_device(device_name)
        if device.type == "cuda":
            device = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(device)
        if self.enabled and not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        return device

    def wait_for_all(self) -> None:
        """Return once every rank has got here: at the end of a run, so that no rank tears down its
        connections while another still works (rank 0 writes the averaged model last)."""
        if self.enabled:
            dist.barrier()

    def stop(self) -> None:
        """Leave the process group, once the trainer that used it is unreachable."""
        if self.enabled and dist.is_initialized():
            # DistributedDataParallel holds the group, and the trainer around it can sit in a
            # reference cycle (torch's first import of its compiler keeps the frame that built the
            # trainer). Left to interpreter exit, gloo's threads would be torn down with the
            # interpreter, which can abort the process (pytorch PR 179291).
            gc.collect()
            dist.destroy_process_group()

    def shard(self, items: Sequence[Item]) -> list[Item]:
        """This rank's share of a global batch (or of the dev set): every world_size-th item."""
        return list(items[self.rank :: self.world_size])

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks."""
        if not self.enabled:
            return values
        # NCCL reduces only GPU tensors; gloo CPU ones.
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
        total = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(total)
        return total.tolist()

    def gather(self, items: list[Any]) -> list[list[Any]]:
        """Every rank's `items`, in rank order, on every rank."""
        if not self.enabled:
            return [items]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, items)
        return gathered

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """The module to call in training: `model` itself, or a DistributedDataParallel around it."""
        if not self.enabled:
            return model
        device_ids = [device.index] if device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
