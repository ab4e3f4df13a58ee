"""Mean/std normalisation of joint states and actions, saved with the model.

The network sees and predicts zero-mean, unit-variance values; the runtime converts the
measured joint positions in and the predicted chunk out. Works on numpy arrays and torch
tensors (any device), normalising over the last axis.

One statistic of the images rides along: `image_reference`, the colour of the scene as the
training light lit it ({"camera": name, "median": [r, g, b] in [0, 1]}), which the colour
balance of policy/colour.py scales other lights back to. Optional: a checkpoint without it
runs without the balance.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

ArrayLike = np.ndarray | torch.Tensor


def _vector(name: str, value: Any) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D vector, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} has non-finite values: {arr.tolist()}")
    return arr


def _image_reference(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != {"camera", "median"}:
        raise ValueError(f"image_reference must be {{'camera': name, 'median': [r, g, b]}}, got {value!r}")
    camera, median = value["camera"], np.asarray(value["median"], dtype=np.float64)
    if not isinstance(camera, str) or not camera:
        raise ValueError(f"image_reference camera must be a camera name, got {camera!r}")
    if median.shape != (3,) or not np.all(np.isfinite(median)) or np.any(median <= 0) or np.any(median > 1):
        raise ValueError(f"image_reference median must be 3 values in (0, 1], got {median.tolist()}")
    return {"camera": camera, "median": [float(x) for x in median]}


class Normalizer:
    """x_norm = (x - mean) / std for states (S,) and actions (A,)."""

    def __init__(self, state_mean: Any, state_std: Any, action_mean: Any, action_std: Any,
                 image_reference: Mapping[str, Any] | None = None):
        self.state_mean = _vector("state_mean", state_mean)
        self.state_std = _vector("state_std", state_std)
        self.action_mean = _vector("action_mean", action_mean)
        self.action_std = _vector("action_std", action_std)
        for kind in ("state", "action"):
            mean, std = getattr(self, f"{kind}_mean"), getattr(self, f"{kind}_std")
            if mean.shape != std.shape:
                raise ValueError(f"{kind}_mean has {mean.size} values but {kind}_std "
                                 f"{std.size}")
            if np.any(std <= 0):
                raise ValueError(f"{kind}_std must be > 0, got {std.tolist()}")
        self.image_reference = _image_reference(image_reference)
        self._torch_cache: dict[tuple[str, torch.device, torch.dtype], torch.Tensor] = {}

    @classmethod
    def fit(cls, states: ArrayLike, actions: ArrayLike, min_std: float = 1e-3) -> Normalizer:
        """Statistics from data: states (T, S), actions (T, A) (or any (..., S|A) layout).

        Standard deviations are floored at min_std: a joint that never moves in the data
        (a finger, a wrist the expert holds fixed) would otherwise divide by ~0.
        """
        s = np.asarray(states, dtype=np.float64)
        a = np.asarray(actions, dtype=np.float64)
        s, a = s.reshape(-1, s.shape[-1]), a.reshape(-1, a.shape[-1])
        if len(s) == 0 or len(a) == 0:
            raise ValueError("cannot fit a normalizer on empty data")
        return cls(s.mean(0), np.maximum(s.std(0), min_std),
                   a.mean(0), np.maximum(a.std(0), min_std))

    @property
    def state_dim(self) -> int:
        return self.state_mean.size

    @property
    def action_dim(self) -> int:
        return self.action_mean.size

    def _stat(self, name: str, like: ArrayLike) -> ArrayLike:
        value = getattr(self, name)
        if isinstance(like, torch.Tensor):
            key = (name, like.device, like.dtype)
            if key not in self._torch_cache:  # no per-call host-to-device copies
                self._torch_cache[key] = torch.as_tensor(value, dtype=like.dtype,
                                                         device=like.device)
            return self._torch_cache[key]
        return value.astype(np.result_type(like.dtype, np.float32), copy=False)

    def _apply(self, x: ArrayLike, kind: str, forward: bool) -> ArrayLike:
        dim = getattr(self, f"{kind}_dim")
        if x.shape[-1] != dim:
            raise ValueError(f"{kind} must end in {dim} values, got shape {tuple(x.shape)}")
        if not isinstance(x, torch.Tensor):
            x = np.asarray(x)
            if not np.issubdtype(x.dtype, np.floating):
                x = x.astype(np.float64)
        mean, std = self._stat(f"{kind}_mean", x), self._stat(f"{kind}_std", x)
        return (x - mean) / std if forward else x * std + mean

    def normalize_state(self, state: ArrayLike) -> ArrayLike:
        return self._apply(state, "state", True)

    def unnormalize_state(self, state: ArrayLike) -> ArrayLike:
        return self._apply(state, "state", False)

    def normalize_action(self, action: ArrayLike) -> ArrayLike:
        return self._apply(action, "action", True)

    def unnormalize_action(self, action: ArrayLike) -> ArrayLike:
        return self._apply(action, "action", False)

    def with_image_reference(self, camera: str, median: Any) -> Normalizer:
        """The same statistics with `image_reference` set (policy.data.fit_normalizer)."""
        return Normalizer(self.state_mean, self.state_std, self.action_mean, self.action_std,
                          {"camera": camera, "median": median})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name).tolist()
                               for name in ("state_mean", "state_std", "action_mean", "action_std")}
        if self.image_reference is not None:
            out["image_reference"] = self.image_reference
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Normalizer:
        names = {"state_mean", "state_std", "action_mean", "action_std"}
        if not isinstance(data, Mapping):
            raise ValueError(f"normalization must be a JSON object, got {type(data).__name__}")
        missing, unknown = sorted(names - set(data)), sorted(set(data) - names - {"image_reference"})
        if missing or unknown:
            raise ValueError(f"normalization keys: missing {missing}, unknown {unknown}")
        return cls(**{k: data[k] for k in names}, image_reference=data.get("image_reference"))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Normalizer):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"Normalizer(state_dim={self.state_dim}, action_dim={self.action_dim})"
