"""Colour balance: undo a change of the light's colour and brightness before the network.

The training images all have one light. Under another (a warmer lamp, a dimmer room: the
`lighting` world of the robustness suite), every pixel's colour shifts, and the network's
target head, which finds the named block by its colour, places it several centimetres off
(docs/training.md, "Colour balance"). Cameras solve this with white balance and exposure;
here the reference is the scene itself: the table fills most of the fixed camera's view, so
the per-channel median of that camera's pixels is the table's colour as lit. Its colour in
the training images is saved with the checkpoint (`Normalizer.image_reference`), and each
camera pair is scaled per channel by reference / measured median, both cameras with the
same gains, as one light lights both:

    balance = ColourBalance(camera_index=0, reference=(0.580, 0.533, 0.467))
    pixels = balance(pixels)   # (B, C, 3, H, W) float in [0, 1] -> the same, balanced

Under the training light the fixed camera's median is the reference to the last bit, so
the gains are exactly 1 and the images pass unchanged; the arm crossing the view moves the
median only where it covers most of the table. A per-channel gain undoes the light's colour
and level (a Lambertian pixel is albedo x light), not its direction: shading and shadows
stay as rendered. Gains are bounded to [MIN_GAIN, MAX_GAIN] so that a camera that sees
no table (covered, black) cannot be scaled without limit.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

MIN_GAIN, MAX_GAIN = 0.5, 2.0


def channel_medians(frames: np.ndarray) -> np.ndarray:
    """(N, H, W, 3) uint8 frames of the fixed camera -> (3,) in [0, 1]: the median over the
    frames of each frame's per-channel median (what the runtime measures, one frame at a time)."""
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[0] == 0 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be (N, H, W, 3) uint8 with N >= 1, got {frames.dtype} {frames.shape}")
    per_frame = torch.from_numpy(frames.reshape(len(frames), -1, 3)).float().div_(255.0).median(dim=1).values
    return per_frame.median(dim=0).values.double().numpy()  # (3,)


class ColourBalance:
    """Per-channel gains from one camera's median to `reference`, applied to every camera."""

    def __init__(self, camera_index: int, reference: Sequence[float]):
        reference = np.asarray(reference, dtype=np.float64)
        if reference.shape != (3,) or not np.all(np.isfinite(reference)) or np.any(reference <= 0) \
                or np.any(reference > 1):
            raise ValueError(f"colour reference must be 3 values in (0, 1], got {reference.tolist()}")
        if camera_index < 0:
            raise ValueError(f"camera_index={camera_index} must be >= 0")
        self.camera_index = camera_index
        self.reference = torch.as_tensor(reference, dtype=torch.float32)
        self.last_gains = torch.ones(3)  # the gains of the last call, for diagnostics

    def gains(self, pixels: torch.Tensor) -> torch.Tensor:
        """(B, C, 3, H, W) -> (B, 3): reference / the camera's per-channel median, bounded."""
        b = pixels.shape[0]
        view = pixels[:, self.camera_index].reshape(b, 3, -1)  # (B, 3, HW)
        medians = view.median(dim=2).values.clamp_min(1.0 / 255.0)  # (B, 3)
        return (self.reference.to(pixels.device) / medians).clamp_(MIN_GAIN, MAX_GAIN)

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        """(B, C, 3, H, W) float in [0, 1] -> balanced, a new tensor; the input is not changed."""
        if pixels.ndim != 5 or pixels.shape[2] != 3 or not 0 <= self.camera_index < pixels.shape[1]:
            raise ValueError(f"pixels must be (B, C, 3, H, W) with camera {self.camera_index} among C, "
                             f"got {tuple(pixels.shape)}")
        gains = self.gains(pixels)  # (B, 3)
        self.last_gains = gains[0].detach().cpu()
        if bool(torch.all(gains == 1.0)):
            return pixels.clone()
        return (pixels * gains[:, None, :, None, None]).clamp_(0.0, 1.0)  # (B, C, 3, H, W)
