"""The peer a user would otherwise run: ACT at LeRobot's default size, in plain torch.

LeRobot's `ACTConfig` defaults (lerobot/policies/act/configuration_act.py) with the
original ACT architecture (Zhao et al. 2023, "Learning Fine-Grained Bimanual Manipulation
with Low-Cost Hardware"): a ResNet18 backbone per camera (its layer4 feature map, 512
channels, stride 32), a 1x1 convolution to the model width D=512, 2D sinusoidal positions
added to queries and keys in every layer (DETR style), 4 post-norm encoder layers and 1
decoder layer with 8 heads and a 3200-wide ReLU MLP, and chunk_size=100 decoder queries. At
inference the CVAE's latent is zero, so its encoder never runs; it is left out.

torchvision is not a dependency of this package, so the ResNet18 is written out here
(BasicBlock, [2, 2, 2, 2]; batch norm folded to a per-channel affine as LeRobot's
FrozenBatchNorm2d is in eval mode), and the backbone runs once per camera as in LeRobot.
Weights are random: only the time is compared, on the same inputs as our policy (two
96x96 cameras, the joint state). benchmarks/peer_check.py copies the weights of LeRobot's
own ACT into this module and checks that the action chunks agree to float32 round-off.
"""
from __future__ import annotations

import math

import torch
from torch import nn


class FrozenBatchNorm2d(nn.Module):
    """Batch norm with fixed statistics: y = x * scale + shift per channel."""

    def __init__(self, channels: int):
        super().__init__()
        self.register_buffer("scale", torch.ones(channels))
        self.register_buffer("shift", torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale[:, None, None] + self.shift[:, None, None]


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = FrozenBatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = FrozenBatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), FrozenBatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + identity)


class ResNet18Trunk(nn.Module):
    """ResNet18 up to layer4 (no pooling, no classifier): (B, 3, H, W) -> (B, 512, H/32, W/32)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), FrozenBatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(self.stem(x))


def sine_positions_2d(h: int, w: int, d: int) -> torch.Tensor:
    """DETR's 2D sinusoidal encoding (temperature 10000, normalised to 2*pi): (h*w, d).

    As LeRobot's ACTSinusoidalPositionEmbedding2d, the row and column indices are divided by
    (last index + 1e-6), so the positions are the same to float32 round-off."""
    half, eps = d // 2, 1e-6
    y = torch.arange(1, h + 1, dtype=torch.float32)[:, None].expand(h, w) / (h + eps) * 2 * math.pi
    x = torch.arange(1, w + 1, dtype=torch.float32)[None, :].expand(h, w) / (w + eps) * 2 * math.pi
    freq = 10000 ** (2 * (torch.arange(half) // 2) / half)
    py, px = y[..., None] / freq, x[..., None] / freq  # (h, w, half)
    py = torch.stack([py[..., 0::2].sin(), py[..., 1::2].cos()], dim=-1).flatten(-2)
    px = torch.stack([px[..., 0::2].sin(), px[..., 1::2].cos()], dim=-1).flatten(-2)
    return torch.cat([py, px], dim=-1).reshape(h * w, d)  # (h*w, D)


class PostNormLayer(nn.Module):
    """ACT's encoder (cross=False) or decoder (cross=True) layer: positions added to the
    queries and keys of every attention, LayerNorm after each residual (pre_norm=False)."""

    def __init__(self, d: int, heads: int, mlp: int, cross: bool):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d, heads, batch_first=True) if cross else None
        self.mlp = nn.Sequential(nn.Linear(d, mlp), nn.ReLU(), nn.Linear(mlp, d))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(3 if cross else 2))

    def forward(self, x, pos, memory=None, memory_pos=None):
        q = x + pos
        x = self.norms[0](x + self.self_attn(q, q, x, need_weights=False)[0])
        if self.cross_attn is not None:
            x = self.norms[1](x + self.cross_attn(x + pos, memory + memory_pos, memory, need_weights=False)[0])
        return self.norms[-1](x + self.mlp(x))


class PeerACT(nn.Module):
    """LeRobot-default ACT: images (B, C, 3, H, W) in [0, 1], state (B, S) -> actions (B, K, A)."""

    def __init__(self, cameras: int = 2, image_size: int = 96, state_dim: int = 9, action_dim: int = 8,
                 width: int = 512, heads: int = 8, mlp: int = 3200, encoder_layers: int = 4,
                 decoder_layers: int = 1, chunk_size: int = 100):
        super().__init__()
        self.backbone = ResNet18Trunk()
        self.feature_proj = nn.Conv2d(512, width, 1)
        self.state_proj = nn.Linear(state_dim, width)
        self.latent = nn.Parameter(torch.zeros(1, width))  # the projected zero latent
        self.token_pos_1d = nn.Parameter(torch.randn(2, width) * 0.02)  # [latent, state]
        side = math.ceil(image_size / 32)
        self.register_buffer("image_pos", sine_positions_2d(side, side, width).repeat(cameras, 1))
        self.encoder = nn.ModuleList(PostNormLayer(width, heads, mlp, cross=False) for _ in range(encoder_layers))
        self.decoder = nn.ModuleList(PostNormLayer(width, heads, mlp, cross=True) for _ in range(decoder_layers))
        self.decoder_norm = nn.LayerNorm(width)
        self.query_pos = nn.Parameter(torch.randn(chunk_size, width) * 0.02)
        self.head = nn.Linear(width, action_dim)
        self.chunk_size = chunk_size

    def forward(self, images: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        b = images.shape[0]
        # One backbone call per camera at batch B, as LeRobot's ACT loops over its cameras
        # (not one call at batch B*C: at batch 1 torch runs small contiguous convolutions
        # on a slower kernel than at batch 2, so batching the cameras would time a model
        # LeRobot does not run).
        features = [self.feature_proj(self.backbone(cam)) for cam in images.unbind(1)]  # C x (B, D, h, w)
        features = torch.cat([f.flatten(2).transpose(1, 2) for f in features], dim=1)  # (B, C*h*w, D)
        x = torch.cat([self.latent.expand(b, -1, -1), self.state_proj(state)[:, None], features], dim=1)  # (B, N, D)
        pos = torch.cat([self.token_pos_1d, self.image_pos], dim=0)[None]  # (1, N, D)
        for layer in self.encoder:
            x = layer(x, pos)
        h = torch.zeros(b, self.chunk_size, x.shape[-1], dtype=x.dtype, device=x.device)  # (B, K, D)
        for layer in self.decoder:
            h = layer(h, self.query_pos[None], memory=x, memory_pos=pos)
        return self.head(self.decoder_norm(h))  # (B, K, A)
