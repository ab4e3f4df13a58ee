"""Multi-head attention written out, a fast path through SDPA, masks and rotary positions.

Attention is a soft lookup (Vaswani et al. 2017, Sec. 3.2.1): scores q.k / sqrt(d_k), a row-wise
softmax into non-negative weights that sum to 1, and the weighted sum of the values.
Dividing by sqrt(d_k) keeps the score variance at 1 whatever the head width, so the
softmax does not saturate at initialisation.

Mask convention (the same as torch's scaled_dot_product_attention): boolean, True means
"this query may attend to this key"; masks broadcast against (B, heads, L, S).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from arm_act.policy.dropout import dropout, dropout_impl


# Masks --------------------------------------------------------------------------------------
def key_padding_mask(valid: torch.Tensor) -> torch.Tensor:
    """valid (B, S) bool, True = real token -> (B, 1, 1, S): padding keys get no weight."""
    if valid.dtype != torch.bool or valid.ndim != 2:
        raise ValueError(f"valid must be a (B, S) bool tensor, got {valid.dtype} "
                         f"{tuple(valid.shape)}")
    return valid[:, None, None, :]  # (B, 1, 1, S)


def causal_mask(n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(n, n): query i sees keys j <= i (GPT-style decoders)."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def block_mask(prefix: int, actions: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(prefix+actions, prefix+actions): a prefix-LM mask (Raffel et al. 2020, Fig. 3).

    The observation prefix is bidirectional among itself and does not see the actions;
    each action token sees the whole prefix and the actions up to and including itself.
    """
    n = prefix + actions
    mask = causal_mask(n, device)  # actions: prefix + earlier actions
    mask[:prefix, :prefix] = True  # the prefix is bidirectional
    return mask


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of the given masks (broadcast); None entries are ignored."""
    out = None
    for m in masks:
        if m is not None:
            out = m if out is None else out & m
    return out


# Rotary positions ---------------------------------------------------------------------------
class RotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021): rotate pair i of a query or key at position m by m * w_i.

    Since R(a)^T R(b) = R(b - a), the score between a query at m and a key at n depends only
    on n - m. Pairs are interleaved dimensions (2i, 2i+1), as in Su et al. 2021.
    """

    def __init__(self, head_dim: int, max_positions: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"head_dim={head_dim} must be even for rotary pairs")
        freqs = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * freqs  # (L, E/2)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, heads, L, E) at positions (L,) long (default 0..L-1) -> rotated, same shape."""
        length = x.shape[-2]
        if positions is None:
            cos, sin = self.cos[:length], self.sin[:length]  # (L, E/2)
        else:
            cos, sin = self.cos[positions], self.sin[positions]  # (L, E/2)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        pairs = x.unflatten(-1, (-1, 2))  # (B, heads, L, E/2, 2)
        x1, x2 = pairs[..., 0], pairs[..., 1]  # (B, heads, L, E/2)
        rotated = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
        return rotated.flatten(-2)  # (B, heads, L, E)


# Attention ----------------------------------------------------------------------------------
def attention_explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       mask: torch.Tensor | None = None,
                       dropout_p: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference path. q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev), mask bool
    broadcastable to (B, H, L, S) -> (out (B, H, L, Ev), weights (B, H, L, S)).

    Masked scores are set to -inf before the softmax, so their weights are exactly 0. A
    query whose keys are all masked gets NaN weights (there is nothing to average).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, L, S)
    if mask is not None:
        # Adding 0 / -inf is masked_fill(~mask, -inf) bit for bit (and its gradient is the
        # same: the softmax's is exactly 0 where the weight is 0), at a quarter of the cost
        # on CPU: the bias has the mask's small shape, and the add broadcasts it.
        bias = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
        scores = scores + bias.masked_fill_(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)  # (B, H, L, S), rows sum to 1
    mixed = dropout(weights, dropout_p) if dropout_p > 0 else weights
    return mixed @ v, weights  # (B, H, L, Ev)


class MultiHeadAttention(nn.Module):
    """Self-attention (memory=None) or cross-attention (queries from x, keys/values from
    memory) with `heads` heads of width D/heads and an output projection W_O that mixes them.

    The fast path is torch's scaled_dot_product_attention (fused, never materialises the
    weights); the explicit path returns the weights. Both compute the same function.
    """

    def __init__(self, width: int, heads: int, dropout: float = 0.0,
                 rope: RotaryEmbedding | None = None):
        super().__init__()
        if width % heads:
            raise ValueError(f"width={width} must be divisible by heads={heads}")
        self.width, self.heads, self.dropout = width, heads, dropout
        # One (3D, D) projection: self-attention computes Q, K, V in a single matmul;
        # cross-attention uses the Q rows on x and the K, V rows on the memory.
        self.in_proj = nn.Linear(width, 3 * width)
        self.out_proj = nn.Linear(width, width)
        self.rope = rope

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.heads, -1).transpose(1, 2)  # (B, H, n, E)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, need_weights: bool = False,
                explicit: bool = False, weight_rows: slice | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, L, D), memory (B, S, D) or None for self-attention, mask bool broadcastable
        to (B, H, L, S) -> (out (B, L, D), weights (B, H, L, S) if need_weights else None).
        weight_rows: only these queries' weights (B, H, rows, S), computed for them alone.
        """
        b, length, d = x.shape
        if memory is None:
            q, k, v = self.in_proj(x).split(d, dim=-1)  # 3 x (B, L, D)
        else:
            w, bias = self.in_proj.weight, self.in_proj.bias
            q = F.linear(x, w[:d], bias[:d])  # (B, L, D)
            k, v = F.linear(memory, w[d:], bias[d:]).split(d, dim=-1)  # 2 x (B, S, D)
        q, k, v = self._split(q), self._split(k), self._split(v)  # (B, H, L|S, E)
        if self.rope is not None:
            q, k = self.rope(q), self.rope(k)
        dropout_p = self.dropout if self.training else 0.0
        weights = None
        if explicit:
            out, weights = attention_explicit(q, k, v, mask, dropout_p)  # (B, H, L, E)
        elif dropout_p > 0 and q.device.type == "cpu" and dropout_impl() == "fast":
            # Training on CPU: the fused kernel has no dropout there (torch falls back to its
            # unfused math path), so the explicit path with the cheaper mask (policy/dropout.py).
            out, _ = attention_explicit(q, k, v, mask, dropout_p)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
            if need_weights:
                # Weights for viewers, computed beside the fused kernel rather than instead of
                # it: asking to see the attention must not change the actions (the fused and
                # explicit paths agree only to float32 rounding, ~1e-7).
                if weight_rows is not None:
                    q = q[:, :, weight_rows]
                    mask = mask[..., weight_rows, :] if mask is not None and mask.shape[-2] > 1 else mask
                _, weights = attention_explicit(q, k, v, mask)
        if weights is not None and weight_rows is not None and weights.shape[-2] == length:
            weights = weights[:, :, weight_rows]  # the explicit path computed every row
        out = out.transpose(1, 2).reshape(b, length, d)  # (B, L, D)
        return self.out_proj(out), (weights if need_weights else None)
