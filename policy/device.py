"""Which torch device a command runs on, and the matching mixed precision: one parsing rule
for `arm-act train/eval --device` and policy_node's `device` parameter.

    device = resolve_device("auto")      # cuda:0 when torch sees a GPU, else cpu
    device = resolve_device("cuda:1")    # DeviceError (one line) when there is no such GPU
    with autocast(device): ...           # bf16 on a GPU that supports it; nothing on CPU

On CPU nothing changes: float32 everywhere, the same kernels, so results are those of a
run without any device option (tests/test_train_golden.py).
"""
from __future__ import annotations

import contextlib
import re

import torch

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
_SPEC = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")


class DeviceError(ValueError):
    """The requested device does not exist here; the message is one line."""


def resolve_device(spec: str | torch.device = "auto") -> torch.device:
    """'auto' (CUDA when present), 'cpu', 'cuda' (= cuda:0) or 'cuda:N' -> torch.device.
    Raises DeviceError for an unknown spelling, a CUDA device without a GPU, or N out of
    range."""
    text = str(spec).strip().lower()
    match = _SPEC.match(text)
    if match is None or (match.group(1) != "cuda" and match.group(2) is not None):
        raise DeviceError(f"device {spec!r}: expected {DEVICE_CHOICES}")
    kind, index = match.group(1), match.group(2)
    if kind == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    if kind == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if available else torch.device("cpu")
    if not available:
        build = torch.__version__
        raise DeviceError(f"device {spec!r}: no CUDA GPU is available (torch {build}"
                          f"{', a CPU-only build' if torch.version.cuda is None else ''}); "
                          "use --device cpu or auto")
    n = torch.cuda.device_count()
    i = int(index) if index is not None else 0
    if i >= n:
        raise DeviceError(f"device {spec!r}: this machine has {n} CUDA device(s), "
                          f"cuda:0..cuda:{n - 1}")
    return torch.device("cuda", i)


def amp_dtype(device: torch.device, precision: str = "auto") -> torch.dtype | None:
    """The autocast dtype for `device`: bf16 on a CUDA GPU that supports it ('auto' or
    'bf16'), None (plain float32) on CPU or with 'fp32'. bf16 needs no loss scaling (same
    exponent range as float32), unlike fp16."""
    if precision not in ("auto", "fp32", "bf16"):
        raise DeviceError(f"precision {precision!r}: expected auto, fp32 or bf16")
    if precision == "fp32" or device.type != "cuda":
        if precision == "bf16" and device.type != "cuda":
            raise DeviceError("precision 'bf16' is for CUDA devices; on CPU training runs in float32")
        return None
    if torch.cuda.is_bf16_supported():
        return torch.bfloat16
    if precision == "bf16":
        raise DeviceError(f"precision 'bf16': {torch.cuda.get_device_name(device)} does not support bf16")
    return None


def autocast(device: torch.device, dtype: torch.dtype | None):
    """torch.autocast on `device` with `dtype`, or a no-op context when dtype is None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
