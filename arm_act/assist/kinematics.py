"""Forward kinematics of a serial URDF chain in numpy: a link's position and its position
Jacobian from the arm's joint angles, with no physics engine.

policy_node's aim correction (`arm_act.assist.aim`) needs where a joint command puts the
grasp point and how the joints move it. The chain is read from the robot's URDF (for the
Panda, the file the simulator loads), so the model is the robot's own:

    kin = ChainKinematics.from_urdf(panda_urdf(), "panda_link0", "panda_grasptarget")
    point = kin.position(q)          # (3,) in the base link's frame, q (7,) rad
    point, J = kin.jacobian(q)       # J (3, 7): d point / d q

Revolute, continuous and fixed joints are supported (prismatic ones on the path raise: the
Panda's fingers are not on the path to panda_grasptarget). tests/test_aim.py checks both
against PyBullet's getLinkState and calculateJacobian at random joint angles.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class _Joint:
    name: str
    kind: str  # "revolute" or "fixed" ("continuous" is stored as revolute)
    origin: np.ndarray  # (4, 4) parent link frame -> joint frame
    axis: np.ndarray  # (3,) unit axis in the joint frame


def _rpy_matrix(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """URDF's fixed-axis roll-pitch-yaw: R = Rz(yaw) Ry(pitch) Rx(roll)."""
    cr, sr, cp, sp, cy, sy = np.cos(roll), np.sin(roll), np.cos(pitch), np.sin(pitch), np.cos(yaw), np.sin(yaw)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def _floats(text: str | None, default: str, what: str) -> np.ndarray:
    values = np.array([float(v) for v in (text or default).split()])
    if values.shape != (3,) or not np.all(np.isfinite(values)):
        raise ValueError(f"URDF {what}={text!r}: expected three finite numbers")
    return values


class ChainKinematics:
    """The joints from `base` to `tip` of a URDF; the movable ones, in order, are the q."""

    def __init__(self, joints: list[_Joint]):
        self.joints = joints
        self.joint_names = tuple(j.name for j in joints if j.kind == "revolute")
        # Precomputed for the hot path (policy_node calls it every control tick): each
        # revolute joint's origin with the fixed joints before it folded in, as (R (3, 3),
        # t (3,)), its axis' cross-product matrix K and K @ K (Rodrigues), and the fixed
        # transform after the last one. A tick's FK is then a few 3x3 products per joint.
        self._links: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        pending = np.eye(4)
        for joint in joints:
            pending = pending @ joint.origin
            if joint.kind == "revolute":
                x, y, z = joint.axis
                k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
                self._links.append((pending[:3, :3].copy(), pending[:3, 3].copy(), joint.axis, k, k @ k))
                pending = np.eye(4)
        self._tail = (pending[:3, :3].copy(), pending[:3, 3].copy())

    @classmethod
    def from_urdf(cls, path: str | Path, base: str, tip: str) -> ChainKinematics:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as exc:
            raise ValueError(f"cannot read the URDF {path}: {exc}") from exc
        by_child: dict[str, ET.Element] = {}
        for joint in root.iter("joint"):
            child, parent = joint.find("child"), joint.find("parent")
            if child is None or parent is None:
                raise ValueError(f"URDF {path}: joint {joint.get('name')!r} lacks a parent or a child")
            by_child[child.get("link", "")] = joint
        chain: list[_Joint] = []
        link = tip
        while link != base:
            joint = by_child.get(link)
            if joint is None:
                raise ValueError(f"URDF {path}: no joint chain from {base!r} to {tip!r} (stuck at {link!r})")
            kind = joint.get("type", "")
            if kind == "continuous":
                kind = "revolute"
            if kind not in ("revolute", "fixed"):
                raise ValueError(f"URDF {path}: joint {joint.get('name')!r} is {kind!r}; only revolute, "
                                 "continuous and fixed joints are supported on the chain")
            origin_el, axis_el = joint.find("origin"), joint.find("axis")
            xyz = _floats(None if origin_el is None else origin_el.get("xyz"), "0 0 0", "origin xyz")
            rpy = _floats(None if origin_el is None else origin_el.get("rpy"), "0 0 0", "origin rpy")
            origin = np.eye(4)
            origin[:3, :3] = _rpy_matrix(*rpy)
            origin[:3, 3] = xyz
            axis = _floats(None if axis_el is None else axis_el.get("xyz"), "1 0 0", "axis")
            if kind == "revolute":
                norm = np.linalg.norm(axis)
                if norm == 0:
                    raise ValueError(f"URDF {path}: joint {joint.get('name')!r} has a zero axis")
                axis = axis / norm
            chain.append(_Joint(joint.get("name", ""), kind, origin, axis))
            parent = joint.find("parent")
            link = parent.get("link", "") if parent is not None else ""
        return cls(chain[::-1])

    def _frames(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
        """The tip's position (3,) and rotation (3, 3), and each movable joint's (origin (3,),
        world axis (3,))."""
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (len(self.joint_names),) or not np.all(np.isfinite(q)):
            raise ValueError(f"joint angles must be {len(self.joint_names)} finite numbers, got shape {q.shape}")
        rotation, position = np.eye(3), np.zeros(3)
        axes = []
        for angle, (r_origin, t_origin, axis, k, k2) in zip(q.tolist(), self._links, strict=True):
            position = position + rotation @ t_origin
            rotation = rotation @ r_origin
            axes.append((position, rotation @ axis))
            rotation = rotation @ (np.eye(3) + math.sin(angle) * k + (1.0 - math.cos(angle)) * k2)
        tip = position + rotation @ self._tail[1]
        return tip, rotation @ self._tail[0], axes

    def position(self, q: np.ndarray) -> np.ndarray:
        """(3,) position of the tip link's frame in the base link's frame."""
        return self._frames(q)[0]

    def pose(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position (3,), rotation (3, 3)) of the tip link's frame in the base link's frame."""
        tip, rotation, _ = self._frames(q)
        return tip, rotation

    def jacobian(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position (3,), J (3, n)): the tip's position and d position / d q."""
        tip, _, axes = self._frames(q)
        origins = np.array([origin for origin, _ in axes])  # (n, 3)
        world_axes = np.array([axis for _, axis in axes])  # (n, 3)
        return tip, np.cross(world_axes, tip - origins).T

    def jacobian6(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(position (3,), rotation (3, 3), J (6, n)): the tip's pose and d (position, angle) /
        d q, the angular rows in the base frame."""
        tip, rotation, axes = self._frames(q)
        origins = np.array([origin for origin, _ in axes])  # (n, 3)
        world_axes = np.array([axis for _, axis in axes])  # (n, 3)
        return tip, rotation, np.vstack([np.cross(world_axes, tip - origins).T, world_axes.T])
