"""The Franka Panda: loading, joint-position control of 7 arm joints + 2 fingers, state.

Joint order everywhere (docs/architecture.md, "The task"): panda_joint1..7, panda_finger_joint1, panda_finger_joint2.
PyBullet ignores URDF <mimic> joints, so both finger joints are commanded with the same
opening (metres, 0 closed .. 0.04 open, per finger).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from arm_act.sim.backend import Backend, panda_urdf_path

ARM_JOINTS: tuple[str, ...] = tuple(f"panda_joint{i}" for i in range(1, 8))
FINGER_JOINTS: tuple[str, ...] = ("panda_finger_joint1", "panda_finger_joint2")
JOINT_NAMES: tuple[str, ...] = ARM_JOINTS + FINGER_JOINTS
GRIPPER_MAX = 0.04
"""Maximum opening of each finger joint (m), from the URDF limit."""

# A top-down posture above the middle of the workspace (grasp point at about
# (0.46, 0.0, 0.32)), fingers open. Also the IK null-space rest pose.
HOME = np.array([0.0, -0.25, 0.0, -2.35, 0.0, 2.1, math.pi / 4, GRIPPER_MAX, GRIPPER_MAX])

# Position gains of PyBullet's POSITION_CONTROL motors (dt = 1/250 s, URDF effort limits as
# max forces). Measured joint tracking error of the expert's 50 Hz targets, one tick after
# each command: gain 0.1 (pybullet's default) max 0.073 rad / median 0.017; gain 0.3 max
# 0.011 / median 0.002, stable; 0.6 gains little more.
ARM_POSITION_GAIN = 0.3
FINGER_POSITION_GAIN = 0.3
FINGER_FORCE = 40.0
"""Finger motor force (N; the URDF says 20): margin against a held block slipping when the
arm accelerates. With the finger gear coupling, measured slip while carrying is < 0.3 mm."""


@dataclass(frozen=True)
class JointStateArrays:
    """Joint state in the joint order above: names (9,), position/velocity/effort (9,) float64."""

    names: tuple[str, ...]
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray


class Panda:
    """A fixed-base Panda in a `Backend` world."""

    def __init__(self, backend: Backend, collision_visuals: bool = True,
                 base_position: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> None:
        self._backend = backend
        self.body = backend.load_urdf(panda_urdf_path(collision_visuals), base_position, fixed_base=True)
        infos = {j.name: j for j in backend.joints(self.body)}
        self.links = {j.link_name: j.index for j in infos.values()}
        self.joint_ids = [infos[n].index for n in JOINT_NAMES]
        self.lower = np.array([infos[n].lower for n in JOINT_NAMES])
        self.upper = np.array([infos[n].upper for n in JOINT_NAMES])
        self.max_force = np.array([infos[n].max_force for n in ARM_JOINTS] + [FINGER_FORCE] * 2)
        self.gains = np.array([ARM_POSITION_GAIN] * 7 + [FINGER_POSITION_GAIN] * 2)
        self.grasp_link = self.links["panda_grasptarget"]
        self.hand_link = self.links["panda_hand"]
        self.finger_links = (self.links["panda_leftfinger"], self.links["panda_rightfinger"])
        for link in self.finger_links:
            # Friction so grasps hold; torsional friction stops the block spinning in the grip.
            backend.set_dynamics(self.body, link, lateralFriction=1.5, spinningFriction=0.01,
                                 frictionAnchor=1)
        # Without coupling, the two independently position-controlled fingers push against each
        # other through a held block and let it slide sideways ~2 cm when the arm accelerates
        # (measured); a gear constraint keeps the fingers symmetric, like the real gripper.
        backend.couple_joints(self.body, self.joint_ids[7], self.joint_ids[8], ratio=-1.0,
                              max_force=FINGER_FORCE)
        self._target = HOME.copy()

    def reset(self, positions: np.ndarray) -> None:
        """Teleport joints (9,) and hold them there."""
        q = np.clip(np.asarray(positions, dtype=np.float64), self.lower, self.upper)
        self._backend.reset_joints(self.body, self.joint_ids, q)
        self._target = q.copy()
        self._send()

    def command(self, arm: np.ndarray, gripper: float) -> np.ndarray:
        """Set position targets: arm (7,) rad, gripper opening (m) for both fingers.

        Values outside the joint limits are clamped (not rejected). Returns the applied (9,)
        target. Validation of length/finiteness is the env's job (boundary)."""
        target = np.concatenate([arm, [gripper, gripper]])
        self._target = np.clip(target, self.lower, self.upper)
        self._send()
        return self._target.copy()

    def _send(self) -> None:
        self._backend.position_control(self.body, self.joint_ids, self._target, self.max_force, self.gains)

    @property
    def target(self) -> np.ndarray:
        """The last commanded (clamped) joint targets (9,)."""
        return self._target.copy()

    def joint_state(self) -> JointStateArrays:
        pos, vel, eff = self._backend.joint_states(self.body, self.joint_ids)
        return JointStateArrays(JOINT_NAMES, pos, vel, eff)

    def gripper_opening(self) -> float:
        """Mean finger joint position (m): the per-finger opening, 0 .. 0.04."""
        pos, _, _ = self._backend.joint_states(self.body, self.joint_ids[7:])
        return float(pos.mean())

