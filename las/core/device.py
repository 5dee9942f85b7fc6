"""Choosing the torch device from `auto | cpu | cuda`, and the arithmetic precision on it."""

from __future__ import annotations

import contextlib

import torch

from las.core.errors import LasError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise LasError("--device cuda: no CUDA device is available")
    if name not in ("cpu", "cuda"):
        raise LasError(f"--device {name!r}: expected auto, cpu or cuda")
    return torch.device(name)


AUTOCAST_TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def bf16_supported(device: torch.device) -> bool:
    """Whether bfloat16 autocast runs this model's kernels here: on CUDA from Ampere on; on a CPU
    only where oneDNN has a bfloat16 LSTM (AVX512-BF16 or AMX), which a small LSTM tries out."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.LSTM(8, 8)(torch.zeros(2, 1, 8))
    except RuntimeError:  # "could not create a primitive descriptor for the LSTM ..."
        return False
    return True


def resolve_precision(device: torch.device, precision: str) -> str:
    """fp32, bf16 or fp16 for a `config.Precision` on `device`; auto: bf16 where it runs, else fp16
    on CUDA (T4, P100: with a gradient scaler), else fp32. One clear error where a choice cannot run."""
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if bf16_supported(device) else "fp16"
        return "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise LasError("--precision fp16 needs a CUDA device (float16 LSTMs have no CPU kernels); use fp32")
    if precision == "bf16" and not bf16_supported(device):
        where = "this GPU (bf16 needs Ampere or newer)" if device.type == "cuda" else "this CPU (no AVX512-BF16/AMX)"
        raise LasError(f"--precision bf16: bfloat16 LSTMs do not run on {where}; use fp16 on a GPU, or fp32")
    return precision


def autocast(device: torch.device, precision: str, cache: bool = True) -> contextlib.AbstractContextManager:
    """Mixed precision for a forward pass (`precision` from `resolve_precision`): bf16 or fp16
    autocast, or plain float32. Without `cache` (what capturing CUDA graphs needs), weights are
    cast anew at each use instead of once per pass."""
    if precision in AUTOCAST_TYPES:
        return torch.autocast(device.type, dtype=AUTOCAST_TYPES[precision], cache_enabled=cache)
    return contextlib.nullcontext()
