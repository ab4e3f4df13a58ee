"""Turning observations into tokens: image patches, position encodings, image helpers.

Each camera image is cut into P x P patches; a linear map (shared by the cameras) embeds
each patch's 3*P*P numbers to width D (ViT, Dosovitskiy et al. 2021). With a convolutional
stem (`PolicyConfig.stem_channels`), each stride-2 3x3 convolution halves the image first, and
the linear map embeds patches of the stem's feature map that cover the same P x P pixels: the
same grid of tokens, each made from local features instead of raw pixels (Xiao et al. 2021,
"Early convolutions help transformers see better"). A fixed 2D sinusoidal
encoding of the patch's (row, column) and a learned per-camera embedding are added, so two
cameras' patches at the same grid position stay distinguishable (the original ACT adds no
camera embedding; its per-camera feature maps share one position encoding).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn


def sinusoidal_1d(positions: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """Vaswani et al. (2017) encoding: dims (2i, 2i+1) = (sin, cos)(p * base^(-2i/dim)).

    positions: (n,) float -> (n, dim). Since sin a sin b + cos a cos b = cos(a - b), the dot
    product of two encodings depends only on the offset between positions.
    """
    if dim % 2:
        raise ValueError(f"dim={dim} must be even for sin/cos pairs")
    freqs = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (dim/2,)
    angles = positions.to(torch.float64)[:, None] * freqs[None, :]  # (n, dim/2)
    enc = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (n, dim/2, 2)
    return enc.reshape(len(positions), dim).to(torch.float32)  # (n, dim)


def sinusoidal_2d(rows: int, cols: int, dim: int) -> torch.Tensor:
    """2D encoding for a rows x cols grid in row-major order: the first dim/2 dimensions
    encode the row, the last dim/2 the column (as in MAE and DETR). -> (rows*cols, dim)."""
    if dim % 4:
        raise ValueError(f"dim={dim} must be a multiple of 4")
    r = sinusoidal_1d(torch.arange(rows, dtype=torch.float64), dim // 2)  # (rows, dim/2)
    c = sinusoidal_1d(torch.arange(cols, dtype=torch.float64), dim // 2)  # (cols, dim/2)
    grid = torch.cat([r[:, None, :].expand(rows, cols, dim // 2),
                      c[None, :, :].expand(rows, cols, dim // 2)], dim=-1)  # (rows, cols, dim)
    return grid.reshape(rows * cols, dim)  # (rows*cols, dim)


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, F, H, W) -> (B, C, h*w, F*P*P) with patches in row-major grid order (F = 3 for
    pixels, the stem's channels after a convolutional stem)."""
    b, c, ch, h, w = images.shape
    gh, gw = h // patch, w // patch
    x = images.reshape(b, c, ch, gh, patch, gw, patch)  # (B, C, F, h, P, w, P)
    x = x.permute(0, 1, 3, 5, 2, 4, 6)  # (B, C, h, w, F, P, P)
    return x.reshape(b, c, gh * gw, ch * patch * patch)  # (B, C, h*w, 3*P*P)


class PatchEmbedding(nn.Module):
    """Camera images -> patch tokens (B, C*h*w, D), cameras one after another, row-major."""

    def __init__(self, cameras: int, image_size: int, patch_size: int, width: int,
                 stem_channels: Sequence[int] = ()):
        super().__init__()
        self.grid = image_size // patch_size
        # Each stem layer halves the side, so a token's P x P pixels are a (P / 2^n)-sided
        # patch of the stem's output.
        self.patch_size = patch_size >> len(stem_channels)
        layers: list[nn.Module] = []
        channels = 3
        for out in stem_channels:
            layers += [nn.Conv2d(channels, out, kernel_size=3, stride=2, padding=1), nn.GELU()]
            channels = out
        self.stem = nn.Sequential(*layers) if layers else None
        self.proj = nn.Linear(channels * self.patch_size * self.patch_size, width)
        self.camera_embed = nn.Parameter(torch.randn(cameras, width) * 0.02)
        # Constant, derived from the config: a non-persistent buffer, so it follows .to()
        # without being allocated per call or stored in the checkpoint.
        self.register_buffer("pos", sinusoidal_2d(self.grid, self.grid, width), persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, 3, H, W) in [0, 1] -> tokens (B, C*h*w, D)."""
        b, c = images.shape[:2]
        # Centre the pixels on 0 so the embedding starts out well conditioned.
        x = images * 2.0 - 1.0  # (B, C, 3, H, W)
        if self.stem is not None:  # every camera through the same stem
            # Channels-last, the layout checkpoints/conv_stem was trained and evaluated in: the
            # layouts' convolutions round differently, and neither is faster here
            # (docs/training.md, "A convolutional stem before the patches").
            x = self.stem(x.flatten(0, 1).contiguous(memory_format=torch.channels_last))  # (B*C, F, H/2^n, W/2^n)
            x = x.unflatten(0, (b, c))  # (B, C, F, H/2^n, W/2^n)
        x = self.proj(patchify(x, self.patch_size))  # (B, C, h*w, D)
        x = x + self.pos[None, None] + self.camera_embed[None, :, None, :]  # (B, C, h*w, D)
        return x.reshape(b, c * self.grid * self.grid, -1)  # (B, C*h*w, D)


def images_to_tensor(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    """uint8 images (..., H, W, 3) as the sim and sensor_msgs/Image rgb8 give them ->
    float32 (..., 3, H, W) in [0, 1]. Always returns a new tensor."""
    x = torch.as_tensor(images)
    if x.dtype != torch.uint8:
        raise ValueError(f"images must be uint8, got {x.dtype}")
    if x.ndim < 3 or x.shape[-1] != 3:
        raise ValueError(f"images must have shape (..., H, W, 3), got {tuple(x.shape)}")
    return x.movedim(-1, -3).to(torch.float32).div_(255.0)  # (..., 3, H, W)


def stack_camera_images(images: Mapping[str, np.ndarray], cameras: Sequence[str]) -> torch.Tensor:
    """{camera name: (H, W, 3) uint8} -> (1, C, 3, H, W) float32 in [0, 1], in config order."""
    missing = [c for c in cameras if c not in images]
    if missing:
        raise ValueError(f"missing camera images {missing}; got {sorted(images)}")
    return images_to_tensor(np.stack([np.asarray(images[c]) for c in cameras]))[None]

