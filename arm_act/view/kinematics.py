"""Forward kinematics of the sim's Panda for the viewer: link poses and the grasp point.

A private PyBullet world in DIRECT mode holding only the arm (the same URDF and joint order
as the sim, arm_act.sim.robot.Panda): resetting its joints and reading link states gives
the pose of every link for a joint state, and the grasp point (panda_grasptarget, between
the fingertips) for each step of a predicted action chunk. No physics is stepped.
"""
from __future__ import annotations

import weakref
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arm_act.sim.backend import Backend, panda_urdf_path
from arm_act.sim.robot import JOINT_NAMES, Panda


@dataclass(frozen=True)
class LinkVisual:
    """A link's render mesh (.obj) and its offset from the link frame (URDF <visual><origin>)."""

    link: str
    mesh: Path
    xyz: tuple[float, float, float]
    rpy: tuple[float, float, float]


def _floats(text: str | None) -> tuple[float, float, float]:
    values = tuple(float(v) for v in (text or "0 0 0").split())
    if len(values) != 3:
        raise ValueError(f"expected three numbers, got {text!r}")
    return values  # type: ignore[return-value]


def link_visuals(urdf: str | Path) -> list[LinkVisual]:
    """The mesh visuals of a URDF whose mesh file names are absolute or relative to it."""
    urdf = Path(urdf)
    visuals = []
    for link in ET.parse(urdf).getroot().iter("link"):
        for visual in link.iter("visual"):
            mesh = visual.find("geometry/mesh")
            if mesh is None:
                continue
            origin = visual.find("origin")
            path = Path(mesh.get("filename", ""))
            visuals.append(LinkVisual(
                link.get("name", ""), path if path.is_absolute() else urdf.parent / path,
                _floats(None if origin is None else origin.get("xyz")),
                _floats(None if origin is None else origin.get("rpy"))))
    return visuals


def rpy_to_quat(rpy: tuple[float, float, float]) -> np.ndarray:
    """URDF roll-pitch-yaw (fixed axes x, y, z) -> quaternion (4,) xyzw."""
    r, p, y = (0.5 * a for a in rpy)
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    return np.array([sr * cp * cy - cr * sp * sy, cr * sp * cy + sr * cp * sy,
                     cr * cp * sy - sr * sp * cy, cr * cp * cy + sr * sp * sy])


class PandaKinematics:
    """Link poses and grasp points of the Panda for joint positions (9,) in JOINT_NAMES order."""

    joint_names = JOINT_NAMES

    def __init__(self) -> None:
        self.urdf = Path(panda_urdf_path(collision_visuals=True))  # small meshes: a small recording
        self._backend = Backend(gui=False)
        self._finalizer = weakref.finalize(self, self._backend.close)
        self._backend.reset_world(1.0 / 250, 10)
        self._arm = Panda(self._backend, collision_visuals=True)
        self.visuals = link_visuals(self.urdf)
        links = self._arm.links
        missing = [v.link for v in self.visuals if v.link not in links and v.link != "panda_link0"]
        if missing:
            raise ValueError(f"{self.urdf}: links {missing} not in the PyBullet model")
        # panda_link0 is the fixed base (PyBullet's link -1), at the world origin.
        self.link_ids = {v.link: links.get(v.link, -1) for v in self.visuals}
        self._client = self._backend.client
        # The fixed base's URDF frame: PyBullet reports the base's centre of mass, which sits
        # at panda_link0's <inertial> origin (5 cm up), so undo that offset once.
        com_p, com_q = self._backend.base_pose(self._arm.body)
        local_p, local_q = self._client.getDynamicsInfo(self._arm.body, -1)[3:5]
        to_frame = self._client.invertTransform(local_p, local_q)
        frame_p, frame_q = self._client.multiplyTransforms(com_p, com_q, *to_frame)
        self._base_frame = np.array([*frame_p, *frame_q])
        # getLinkStates reads these links in one call: the meshed links, then the grasp target.
        self._state_links = [i for i in self.link_ids.values() if i >= 0] + [self._arm.grasp_link]
        position = {link: k for k, link in enumerate(self._state_links[:-1])}
        self._rows = [position[i] if i >= 0 else -1 for i in self.link_ids.values()]

    def close(self) -> None:
        """Release the private PyBullet client; idempotent."""
        self._finalizer()

    def _set(self, q: np.ndarray) -> None:
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (len(JOINT_NAMES),):
            raise ValueError(f"joint positions have shape {q.shape}, expected ({len(JOINT_NAMES)},)")
        # One batched call instead of Backend.reset_joints' call per joint: the viewer does this
        # for every joint state (100 Hz) and 50 times per chunk, where the per-joint loop cost
        # ~140 us per pose here, the batched calls ~20 us.
        self._client.resetJointStatesMultiDof(self._arm.body, self._arm.joint_ids, [[float(v)] for v in q])

    def poses(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For joints q (9,): link poses (L, 7) [x y z qx qy qz qw] in the world frame, in the
        order of `visuals`, and the grasp point (3,) (panda_grasptarget)."""
        self._set(q)
        states = self._client.getLinkStates(self._arm.body, self._state_links, computeForwardKinematics=1)
        out = np.empty((len(self._rows), 7))
        for row, index in enumerate(self._rows):
            if index < 0:
                out[row] = self._base_frame
            else:
                state = states[index]
                out[row, :3], out[row, 3:] = state[4], state[5]
        return out, np.asarray(states[-1][4], dtype=np.float64)

    def link_poses(self, q: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """{link: (position (3,), orientation (4,) xyzw)} in the world frame for joints q (9,)."""
        poses, _ = self.poses(q)
        return {v.link: (p[:3], p[3:]) for v, p in zip(self.visuals, poses, strict=True)}

    def grasp_point(self, q: np.ndarray) -> np.ndarray:
        """World position (3,) of panda_grasptarget for joints q (9,)."""
        self._set(q)
        state = self._client.getLinkState(self._arm.body, self._arm.grasp_link, computeForwardKinematics=1)
        return np.asarray(state[4], dtype=np.float64)

    def chunk_path(self, chunk: np.ndarray) -> np.ndarray:
        """(K, 8) chunk of [7 joint targets, gripper opening] -> (K, 3) grasp points."""
        chunk = np.asarray(chunk, dtype=np.float64)
        if chunk.ndim != 2 or chunk.shape[1] != 8:
            raise ValueError(f"chunk has shape {chunk.shape}, expected (K, 8)")
        q = np.empty(len(JOINT_NAMES))
        points = np.empty((len(chunk), 3))
        for k, row in enumerate(chunk):  # (8,) -> (9,): both fingers at the opening
            q[:7], q[7:] = row[:7], row[7]
            points[k] = self.grasp_point(q)
        return points
