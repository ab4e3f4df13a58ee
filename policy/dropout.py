"""Dropout whose mask costs a quarter of the random draws of torch's.

On CPU, torch's dropout draws one Bernoulli variate per element from the generator
(aten::bernoulli_): profiled, 28 % of a training step of the shipped configuration on one core
(and F.scaled_dot_product_attention with dropout_p > 0 falls back to its unfused math path,
3.4x slower than without). Here one 64-bit word from the same generator gives four 16-bit
uniforms; an element is dropped when its uniform is below round(p * 65536), so the drop
probability is p to within 1/65536 (0.1 -> 0.100006), and kept elements are scaled by the
exact inverse of the keep probability, so the expectation is unchanged. Masks come from
torch's global generator, as nn.Dropout's do (training seeds it; policy/train.py).

IMPL = "torch" restores torch's own dropout (benchmarks compare the two; arm_act/bench/train_speed.py).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IMPL = "fast"  # or "torch"
_LEVELS = 65536


def dropout_impl() -> str:
    return IMPL


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """x with elements zeroed with probability ~p (see the module docstring) and the rest
    scaled by 1 / (1 - p'); x itself when not training or p == 0."""
    if not training or p <= 0.0:
        return x
    if IMPL == "torch" or x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training=True)
    threshold = int(round(p * _LEVELS))
    if threshold == 0:
        return x
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None)
    uniforms = words.view(torch.int16)[:n].view(x.shape)  # uniform on -32768 .. 32767
    # keep = uniforms >= threshold - 32768, as a float 0/1 without a bool tensor: the
    # uniforms are integers, so u - (threshold - 32769) is >= 1 exactly when kept and <= 0
    # otherwise, and clamping to [0, 1] gives exactly 1 or 0. The same mask as the
    # comparison, bit for bit, in half the time (torch's int16 compare and bool -> float
    # conversion are not vectorised on CPU: 2.9 -> 1.3 ms for a (32, 81, 512) mask, one core).
    keep = uniforms.to(x.dtype).sub_(threshold - _LEVELS // 2 - 1).clamp_(0.0, 1.0)
    scale = _LEVELS / (_LEVELS - threshold)
    return x * keep.mul_(scale)


class Dropout(nn.Module):
    """nn.Dropout with the mask of dropout() above; the same state dict (none)."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability {p} must be in [0, 1]")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
