"""Choosing the torch device from `auto | cpu | cuda`, and the arithmetic precision on it."""

from __future__ import annotations

import contextlib

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


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """Mixed precision for a forward pass: bf16 autocast (no loss scaling needed, unlike fp16), or
    plain float32 (`precision` is one of config.Precision, checked when the config was made)."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
