"""Cameras: a `CameraConfig` turned into view/projection matrices, images and intrinsics.

Intrinsics follow PyBullet's projection (computeProjectionMatrixFOV with aspect = W/H and a
VERTICAL fov): fy = (H/2) / tan(fov/2), fx = fy (square pixels), cx = W/2, cy = H/2, in the
optical frame of ROS (x right, y down, z forward). Pixel (row i, column j) covers continuous
image coordinates [j, j+1) x [i, i+1), so its centre is (j + 0.5, i + 0.5); tests check
this against where a block is actually drawn.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from arm_act.sim.backend import Backend, projection_matrix, quat_to_matrix, view_matrix
from arm_act.sim.config import CameraConfig


def intrinsics(cfg: CameraConfig) -> np.ndarray:
    """Pinhole matrix K (3,3) matching PyBullet's vertical-fov projection."""
    fy = (cfg.height / 2.0) / math.tan(math.radians(cfg.fov_deg) / 2.0)
    return np.array([[fy, 0.0, cfg.width / 2.0], [0.0, fy, cfg.height / 2.0], [0.0, 0.0, 1.0]])


class Camera:
    """Renders one camera of a world. `link_pose` gives the mount link's world pose for
    mount="link" cameras (None for fixed ones)."""

    def __init__(self, backend: Backend, cfg: CameraConfig,
                 link_pose: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None,
                 light: dict | None = None) -> None:
        """light: getCameraImage light arguments for every render (None: PyBullet's defaults)."""
        if cfg.mount == "link" and link_pose is None:
            raise ValueError(f"camera {cfg.name!r} is mounted on link {cfg.link!r} but no link pose was given")
        self.config = cfg
        self._backend = backend
        self._link_pose = link_pose
        self._light = light
        self._projection = projection_matrix(cfg.fov_deg, cfg.width / cfg.height, cfg.near, cfg.far)
        self.K = intrinsics(cfg)

    def eye_target_up(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """World eye (3,), target (3,), up (3,) for the current robot state."""
        cfg = self.config
        if cfg.mount == "fixed":
            return np.array(cfg.eye, float), np.array(cfg.target, float), np.array(cfg.up, float)
        pos, orn = self._link_pose()  # type: ignore[misc]
        rot = quat_to_matrix(orn)
        eye = pos + rot @ np.asarray(cfg.eye, float)
        look = rot @ np.asarray(cfg.look, float)
        return eye, eye + look / np.linalg.norm(look), rot @ np.asarray(cfg.up, float)

    def world_to_optical(self) -> np.ndarray:
        """Homogeneous (4,4) transform world -> camera optical frame (x right, y down, z fwd)."""
        eye, target, up = self.eye_target_up()
        z = target - eye
        z /= np.linalg.norm(z)
        x = np.cross(z, up)
        x /= np.linalg.norm(x)
        y = np.cross(z, x)
        rot = np.stack([x, y, z])  # (3, 3) rows: optical axes in world coordinates
        out = np.eye(4)
        out[:3, :3] = rot
        out[:3, 3] = -rot @ eye
        return out

    def project(self, points: np.ndarray) -> np.ndarray:
        """Pixel coordinates (N, 2) (u right, v down) of world points (N, 3)."""
        pts = np.atleast_2d(np.asarray(points, float))
        T = self.world_to_optical()
        cam = pts @ T[:3, :3].T + T[:3, 3]  # (N, 3) optical frame
        uvw = cam @ self.K.T  # (N, 3)
        return uvw[:, :2] / uvw[:, 2:3]

    def render(self) -> np.ndarray:
        """RGB image (height, width, 3) uint8, a fresh array."""
        eye, target, up = self.eye_target_up()
        view = view_matrix(eye, target, up)
        return self._backend.render(self.config.width, self.config.height, view, self._projection, self._light)
