"""The random states a checkpoint keeps, so that a resumed run draws what the uninterrupted one
would have: torch's (CPU and CUDA), Python's and NumPy's, for every rank."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from las.training.distributed import Distributed


def capture_rng() -> dict[str, Any]:
    """This process's random states: torch's (CPU and CUDA), Python's and NumPy's, in types that a
    checkpoint loads without unpickling code (NumPy's key as a tensor)."""
    name, key, position, has_gauss, gauss = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(key.astype(np.int64)), position, has_gauss, gauss),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(saved: dict[str, Any], distributed: Distributed) -> bool:
    """This rank's random states from a checkpoint's (every rank's, or before they were kept, the
    one process's); False where it holds none for this rank (another number of processes)."""
    ranks = saved.get("ranks", [saved] if saved else [])
    if len(ranks) != distributed.world_size:
        return False
    state = ranks[distributed.rank]
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        name, key, position, has_gauss, gauss = state["numpy"]
        np.random.set_state((name, key.numpy().astype(np.uint32), position, has_gauss, gauss))
    return True
