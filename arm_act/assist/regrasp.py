"""The re-grasp reflex: after a grasp that closed on nothing, a short scripted retry aimed at
the block that the policy's own target head sees.

The grasp check (arm_act.assist.aim) finds a missed grasp from the fingers. Left to the
chunks, the retry fails more often than not (docs/training.md, "Re-grasping"): the policy,
reopened beside a block it has just missed, closes again at once, where it stands, and its
target head, while the hand is low and closing, reports the block where the hand is. So
the retry is a reflex, as a grasp primitive on a real arm would be:

    reflex = RegraspReflex(kinematics, control_rate=50.0)
    reflex.start(arm_command)              # at the reopening: (7,) rad, the last command
    reflex.observe(target)                 # each new chunk's target estimate (3,) m, or None
    arm, gripper = reflex.step(measured)   # each tick, (7,) rad measured -> the command
    reflex.active                          # False once the fingers have closed again

Its phases, each a straight line of the grasp point at no more than `speed`, the hand's
orientation held as it was at the reopening (the block keeps its yaw when it slides):

1. **rise**: up to `rise` above the estimate's height, fingers open;
2. **look**: hold still there for `looks` camera pairs and average their estimates. Near
   the block the target head reports the block partly where the hand is (a hand moved 5 cm
   sideways at 9 cm above the block moved the estimate 3.9 cm with it); 20 cm up the pull is
   gone, as it is at the start of an episode;
3. **over**: across to above that estimate, now fixed;
4. **descend**: down to it;
5. **close**: the gripper command closed for `close_time`; then the reflex ends and the
   chunks take over again, with a block between the fingers (or, when it missed again, the
   grasp check reopens and the reflex starts over, up to `regrasps` times an episode).

The joint command comes from damped least squares on the grasp point's 6-D Jacobian
(position and the hand's orientation), a few iterations a tick from the last command.
Nothing here reads the simulator: the estimate is the network's output, the kinematics the
robot's URDF. `timeout` bounds a reflex that cannot reach its goal; then the chunks resume.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arm_act.assist.kinematics import ChainKinematics

RISE, LOOK, OVER, DESCEND, CLOSE = "rise", "look", "over", "descend", "close"
MAX_HEIGHT = 0.30  # m: the rise goes no higher than this (unless the hand is already higher)


@dataclass(frozen=True)
class RegraspSettings:
    """The reflex's constants (metres, seconds, m/s); see the module docstring."""

    rise: float = 0.2  # m above the block's estimated height: far enough that the hand no longer pulls the estimate
    looks: int = 3  # camera pairs whose estimates are averaged up there, the hand still
    speed: float = 0.25
    reach: float = 0.008  # the measured grasp point this close to a phase's goal ends it
    close_time: float = 0.5
    timeout: float = 6.0
    damping: float = 1e-3
    iterations: int = 3
    rotation_weight: float = 0.2  # m per rad: how much the hand's orientation counts against position
    open_width: float = 0.04  # m per finger: the gripper command while the fingers are open

    def __post_init__(self) -> None:
        for name in ("rise", "speed", "reach", "close_time", "timeout", "damping", "rotation_weight", "open_width"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"regrasp {name}={value} must be a finite number > 0")
        for name in ("looks", "iterations"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"regrasp {name}={value!r} must be a whole number >= 1")


def rotation_error(current: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """(3,) rotation vector taking `current` (3, 3) to `wanted`, in the base frame."""
    r = wanted @ current.T
    angle = float(np.arccos(np.clip((np.trace(r) - 1.0) / 2.0, -1.0, 1.0)))
    axis = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]])
    if angle < 1e-9:
        return 0.5 * axis
    return axis * (angle / (2.0 * np.sin(angle)))


class RegraspReflex:
    """The scripted retry after a missed grasp; module docstring."""

    def __init__(self, kinematics: ChainKinematics, control_rate: float = 50.0,
                 settings: RegraspSettings | None = None):
        if not (np.isfinite(control_rate) and control_rate > 0):
            raise ValueError(f"control_rate={control_rate} must be a finite number > 0")
        self.kinematics = kinematics
        self.settings = settings or RegraspSettings()
        self.dt = 1.0 / float(control_rate)
        self.step_length = self.settings.speed * self.dt  # m of the grasp point per tick
        self.active = False
        self.phase: str | None = None
        self.starts = 0  # reflexes started since the last reset

    def reset(self) -> None:
        self.active, self.phase, self.starts = False, None, 0

    def start(self, arm: np.ndarray) -> None:
        """Begin a retry from the arm command (7,) in effect when the grasp reopened."""
        q = np.asarray(arm, dtype=np.float64).copy()
        point, rotation = self.kinematics.pose(q)
        self.q, self.point, self.rotation = q, point, rotation
        self.height = max(point[2], min(point[2] + self.settings.rise, MAX_HEIGHT))
        self.target: np.ndarray | None = None
        self.seen: list[np.ndarray] = []  # estimates of the look phase
        self.goal: np.ndarray | None = np.array([point[0], point[1], self.height])
        self.phase, self.active, self.elapsed, self.closing = RISE, True, 0.0, 0.0
        self.starts += 1

    def observe(self, target: np.ndarray | None) -> None:
        """A new chunk's target estimate (3,) m. Kept only while the hand waits away from the
        block (the look phase): near it the target head reports it where the hand is."""
        if not self.active or self.phase != LOOK or target is None:
            return
        target = np.asarray(target, dtype=np.float64)
        if target.shape != (3,) or not np.all(np.isfinite(target)):
            return
        self.seen.append(target.copy())
        if len(self.seen) >= self.settings.looks:
            self.target = np.mean(self.seen, axis=0)
            self.phase = OVER
            top = max(self.height, self.target[2] + self.settings.rise)
            self.goal = np.array([self.target[0], self.target[1], top])

    def step(self, measured: np.ndarray | None = None) -> tuple[np.ndarray, float]:
        """The command (arm (7,), gripper m) for this tick; `measured` (7,) rad lets a phase end
        when the arm itself, not only the command, has reached its goal."""
        s = self.settings
        self.elapsed += self.dt
        if self.elapsed > s.timeout:
            self.active = False
        if not self.active:
            return self.q.copy(), 0.0
        if self.phase == CLOSE:
            self.closing += self.dt
            if self.closing >= s.close_time:
                self.active = False
            return self.q.copy(), 0.0
        if self.phase != LOOK:
            goal = self.goal
            gap = goal - self.point
            norm = float(np.linalg.norm(gap))
            self.point = goal.copy() if norm <= self.step_length else self.point + gap * (self.step_length / norm)
            self.q = self._solve(self.q, self.point)
            if norm <= self.step_length and self._reached(goal, measured):
                self._next_phase()
        return self.q.copy(), s.open_width if self.phase != CLOSE else 0.0

    def _reached(self, goal: np.ndarray, measured: np.ndarray | None) -> bool:
        if measured is None:
            return True
        measured = np.asarray(measured, dtype=np.float64)
        if measured.shape != self.q.shape or not np.all(np.isfinite(measured)):
            return True
        return float(np.linalg.norm(self.kinematics.position(measured) - goal)) <= self.settings.reach

    def _next_phase(self) -> None:
        if self.phase == RISE:
            self.phase, self.seen = LOOK, []  # hold still; observe() moves on
        elif self.phase == OVER:
            self.phase, self.goal = DESCEND, self.target.copy()
        elif self.phase == DESCEND:
            self.phase, self.closing = CLOSE, 0.0

    def _solve(self, q: np.ndarray, point: np.ndarray) -> np.ndarray:
        """Joint angles near q placing the grasp point at `point` with the held orientation."""
        s = self.settings
        w = s.rotation_weight
        for _ in range(s.iterations):
            position, rotation, J = self.kinematics.jacobian6(q)
            error = np.concatenate([point - position, w * rotation_error(rotation, self.rotation)])
            jw = np.vstack([J[:3], w * J[3:]])
            q = q + jw.T @ np.linalg.solve(jw @ jw.T + s.damping * np.eye(6), error)
        return q
