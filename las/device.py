"""Choosing the torch device from `auto | cpu | cuda`."""

from __future__ import annotations

import torch

from las.errors import LasError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise LasError("--device cuda: no CUDA device is available")
    if name not in ("cpu", "cuda"):
        raise LasError(f"--device {name!r}: expected auto, cpu or cuda")
    return torch.device(name)
