"""Transformer blocks: attention and a per-token MLP, each wrapped in a residual and a
LayerNorm.

Pre-LN (the default) normalises before each sublayer, x + f(LN(x)), so each layer adds a
bounded amount to the residual stream and trains without warm-up (Xiong et al. 2020);
Post-LN, LN(x + f(x)), is the original transformer's and is selectable.
"""

from __future__ import annotations

import torch
from torch import nn

from arm_act.policy.attention import MultiHeadAttention, RotaryEmbedding
from arm_act.policy.dropout import Dropout


class MLP(nn.Module):
    """Per-token MLP D -> ratio*D -> D (GELU)."""

    def __init__(self, width: int, ratio: int, dropout: float):
        super().__init__()
        self.fc1 = nn.Linear(width, ratio * width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(ratio * width, width)
        self.drop = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.act(self.fc1(x))))  # (B, n, D)


class _Residual(nn.Module):
    """One sublayer with its LayerNorm and residual, Pre-LN or Post-LN."""

    def __init__(self, width: int, dropout: float, pre_ln: bool):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.drop = Dropout(dropout)
        self.pre_ln = pre_ln

    def sublayer_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the sublayer reads: LN(x) for Pre-LN, x for Post-LN."""
        return self.norm(x) if self.pre_ln else x

    def add(self, x: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        """The new residual stream: x + f for Pre-LN, LN(x + f) for Post-LN."""
        y = x + self.drop(update)
        return y if self.pre_ln else self.norm(y)


class EncoderLayer(nn.Module):
    """Bidirectional self-attention over all tokens, then the MLP."""

    def __init__(self, width: int, heads: int, mlp_ratio: int, dropout: float, pre_ln: bool):
        super().__init__()
        self.attn = MultiHeadAttention(width, heads, dropout)
        self.attn_res = _Residual(width, dropout, pre_ln)
        self.mlp = MLP(width, mlp_ratio, dropout)
        self.mlp_res = _Residual(width, dropout, pre_ln)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, rows: slice | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, N, D), mask bool broadcastable to (B, H, N, N) -> ((B, N, D), with `rows` (a
        slice of the tokens) their self-attention weights (B, H, rows, N), else None)."""
        update, weights = self.attn(self.attn_res.sublayer_input(x), mask=mask, need_weights=rows is not None,
                                    weight_rows=rows)
        x = self.attn_res.add(x, update)
        return self.mlp_res.add(x, self.mlp(self.mlp_res.sublayer_input(x))), weights  # (B, N, D)


class DecoderLayer(nn.Module):
    """Self-attention among the K action queries, cross-attention from them to the encoder
    output (the memory), then the MLP (DETR/ACT decoder layer)."""

    def __init__(self, width: int, heads: int, mlp_ratio: int, dropout: float, pre_ln: bool,
                 rope: RotaryEmbedding | None = None):
        super().__init__()
        self.self_attn = MultiHeadAttention(width, heads, dropout, rope=rope)
        self.self_res = _Residual(width, dropout, pre_ln)
        self.cross_attn = MultiHeadAttention(width, heads, dropout)
        self.cross_res = _Residual(width, dropout, pre_ln)
        self.mlp = MLP(width, mlp_ratio, dropout)
        self.mlp_res = _Residual(width, dropout, pre_ln)

    def forward(self, x: torch.Tensor, memory: torch.Tensor,
                memory_mask: torch.Tensor | None = None, need_weights: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, K, D), memory (B, N, D), memory_mask bool broadcastable to (B, H, K, N)
        -> (x (B, K, D), cross-attention weights (B, H, K, N) if need_weights else None)."""
        update, _ = self.self_attn(self.self_res.sublayer_input(x))
        x = self.self_res.add(x, update)
        update, weights = self.cross_attn(self.cross_res.sublayer_input(x), memory, memory_mask,
                                          need_weights=need_weights)
        x = self.cross_res.add(x, update)
        x = self.mlp_res.add(x, self.mlp(self.mlp_res.sublayer_input(x)))  # (B, K, D)
        return x, weights


class Encoder(nn.Module):
    """A stack of encoder layers (+ a final LayerNorm for Pre-LN, whose stream is
    otherwise unnormalised)."""

    def __init__(self, layers: int, width: int, heads: int, mlp_ratio: int, dropout: float,
                 pre_ln: bool):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(width, heads, mlp_ratio, dropout, pre_ln)
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(width) if pre_ln else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, rows: slice | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, N, D) -> (B, N, D), and with `rows` (a slice of the tokens) the self-attention
        weights of those tokens averaged over the layers (B, H, rows, N), else None."""
        total = None
        for layer in self.layers:
            x, weights = layer(x, mask, rows)  # (B, N, D)
            if weights is not None:
                total = weights if total is None else total + weights
        return self.norm(x), None if total is None else total / len(self.layers)


class Decoder(nn.Module):
    """A stack of decoder layers. Each layer feeds the next and only the last layer's output
    (after the final norm) reaches the head, so every layer shapes the prediction; the
    original ACT kept 7 layers but read the first one's output (tonyzhaozh/act#25)."""

    def __init__(self, layers: int, width: int, heads: int, mlp_ratio: int, dropout: float,
                 pre_ln: bool, rope: RotaryEmbedding | None = None):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(width, heads, mlp_ratio, dropout, pre_ln, rope) for _ in range(layers))
        self.norm = nn.LayerNorm(width) if pre_ln else nn.Identity()

    def forward(self, x: torch.Tensor, memory: torch.Tensor,
                memory_mask: torch.Tensor | None = None, need_weights: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """-> (x (B, K, D), the last layer's cross-attention weights or None). Only the last
        layer takes the explicit path when weights are wanted."""
        weights = None
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x, weights = layer(x, memory, memory_mask, need_weights=need_weights and i == last)
        return self.norm(x), weights
