"""Aim correction: the arm's grasp is steered onto the block that the policy's own target
head sees.

The failures of the chunk decoder are aim. Its arm trajectory can come down 2-3.5 cm
short of the named block while the target head of the same network places that block to
within 0.3-1.3 cm (docs/training.md, "Aim correction"). The corrector closes that gap at
execution time, between the chunk executor and the command limiter:

    aim = AimCorrector(ChainKinematics.from_urdf(urdf, "panda_link0", "panda_grasptarget"))
    aim.reset()                                  # each episode
    aim.observe(prediction.target)               # each new chunk's target estimate (3,) m
    arm = aim.correct(arm, gripper)              # each tick, on the executor's action

How it works, per tick:

- **Approach** (the gripper command open, above `open_above`). The estimate is smoothed
  over chunks (`smoothing`). The grasp point of the commanded joints is computed with the
  arm's forward kinematics. The horizontal gap between it and the estimate, capped at
  `max_shift`, is the wanted shift. It is weighted 0 while the commanded grasp point is
  `start_height` or more above the estimate and 1 from `full_height` down, linearly between.
  So the policy's own trajectory is untouched far from the block, and the fingers come down
  around it.
- **Closing and holding** (the command closed). The shift in effect when the command closed
  is kept, so the fingers close where they were aimed. Estimates are ignored: the hand
  hides the block. Once the commanded grasp point is `lift_height` above the estimate (the
  block is lifted, or the grasp missed and the arm rose), the shift goes back to 0.
- **Opened again** (a re-grasp, or the release over the box). The old estimate is dropped,
  and the next chunks' estimates aim the next grasp.
- **The grasp check** (`missed`, called by ActionSelector with the measured fingers): a
  closed command whose fingers have closed past `miss_opening` holds nothing. The selector
  then reopens the gripper and drops the chunks that carry that grasp on, at most
  `regrasps` times an episode, and the next grasp is aimed as above.

The shift moves toward the wanted one at no more than `max_speed` (m/s), and back to 0
after a grasp at `release_speed`, so a change of state never jumps the arm or the block in
the fingers. It is turned into joint offsets with the damped least-squares
inverse of the grasp point's position Jacobian, dq = J^T (J J^T + lambda I)^-1 dx. That
moves the grasp point horizontally and leaves the hand's height alone. The command limiter
after it still bounds joint limits and speed.

Nothing here reads the simulator: the estimate is the network's output, the kinematics the
robot's URDF, the grasp check the finger joints. A policy without a target head gets no correction (`observe(None)`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arm_act.assist.kinematics import ChainKinematics
from arm_act.assist.regrasp import RegraspReflex, RegraspSettings
from arm_act.policy.inference_config import RETRIES, InferenceConfig

_DEFAULTS = InferenceConfig.defaults()  # the re-grasp count and retry have their one default there


MISS_OPENING = 0.008
"""m per finger: closed this far on a closed command, the fingers hold nothing (a 3.2-4.8 cm
block keeps them 1.6-2.4 cm apart each). The grasp check here and `arm-act collect
--handover miss` (arm_act.data.collect) use the same rule."""


@dataclass(frozen=True)
class AimSettings:
    """The corrector's constants (metres, seconds); see the module docstring."""

    max_shift: float = 0.05
    start_height: float = 0.15
    full_height: float = 0.07
    lift_height: float = 0.06
    open_above: float = 0.035
    smoothing: float = 0.5
    max_speed: float = 0.25
    release_speed: float = 0.05
    damping: float = 1e-3
    miss_opening: float = MISS_OPENING
    closed_below: float = 0.01
    regrasps: int = _DEFAULTS["regrasps"]
    retry: str = _DEFAULTS["retry"]
    """How a reopened grasp is retried: "reflex" (arm_act.assist.regrasp: up, over the
    estimate, down, close; then the chunks again) or "policy" (the chunks, aim-corrected)."""
    reflex: RegraspSettings = RegraspSettings()

    def __post_init__(self) -> None:
        for name in ("max_shift", "start_height", "full_height", "lift_height", "open_above", "max_speed",
                     "release_speed", "damping"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"aim {name}={value} must be a finite number > 0")
        if not self.start_height > self.full_height:
            raise ValueError(f"aim start_height={self.start_height} must be above full_height={self.full_height}")
        if not 0.0 <= self.smoothing < 1.0:
            raise ValueError(f"aim smoothing={self.smoothing} must be in [0, 1)")
        for name in ("miss_opening", "closed_below"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"aim {name}={value} must be a finite number > 0")
        if not (isinstance(self.regrasps, int) and self.regrasps >= 0):
            raise ValueError(f"aim regrasps={self.regrasps!r} must be a whole number >= 0")
        if self.retry not in RETRIES:
            raise ValueError(f"aim retry={self.retry!r} must be one of {list(RETRIES)}")


class AimCorrector:
    """Steers the commanded grasp point onto the target head's estimate; module docstring."""

    def __init__(self, kinematics: ChainKinematics, control_rate: float = 50.0,
                 settings: AimSettings | None = None):
        if not (np.isfinite(control_rate) and control_rate > 0):
            raise ValueError(f"control_rate={control_rate} must be a finite number > 0")
        self.kinematics = kinematics
        self.settings = settings or AimSettings()
        self.step = self.settings.max_speed / float(control_rate)  # m of shift change per tick
        self.release_step = self.settings.release_speed / float(control_rate)
        self.reflex = (RegraspReflex(kinematics, control_rate, self.settings.reflex)
                       if self.settings.retry == "reflex" else None)
        self.reset()

    @classmethod
    def for_urdf(cls, urdf: str, base: str = "panda_link0", tip: str = "panda_grasptarget",
                 control_rate: float = 50.0, settings: AimSettings | None = None) -> AimCorrector:
        return cls(ChainKinematics.from_urdf(urdf, base, tip), control_rate, settings)

    def reset(self) -> None:
        """A new episode: no estimate, no shift."""
        self.target: np.ndarray | None = None
        self.shift = np.zeros(3)
        self.closed = False
        self.corrections = 0  # ticks with a non-zero shift, this episode
        self.largest_shift = 0.0  # m, this episode
        self.misses = 0  # grasps found closed on nothing and reopened, this episode
        if self.reflex is not None:
            self.reflex.reset()

    def observe(self, target: np.ndarray | None) -> None:
        """A new chunk's target estimate (3,) m in the arm's base frame (None: the policy has
        no target head). Ignored while the gripper is closed, and when not finite."""
        if target is None or self.closed:
            return
        target = np.asarray(target, dtype=np.float64)
        if target.shape != (3,) or not np.all(np.isfinite(target)):
            return
        a = self.settings.smoothing
        self.target = target.copy() if self.target is None else a * self.target + (1.0 - a) * target

    def missed(self, gripper: float, fingers: float) -> bool:
        """The grasp check, with this tick's gripper command and measured finger opening (m
        per finger): True when the command is closed and the fingers have closed past
        `miss_opening`, which no block allows (a 3.2-4.8 cm block keeps them 1.6-2.4 cm
        apart each), at most `regrasps` times an episode. The caller then reopens the
        gripper and drops the chunks that carry on with the missed grasp (ActionSelector);
        the next grasp is aimed afresh."""
        s = self.settings
        if (self.misses >= s.regrasps or not self.closed or not gripper < s.closed_below
                or not (np.isfinite(fingers) and fingers < s.miss_opening)):
            return False
        self.misses += 1
        self.closed, self.target = False, None
        return True

    def start_retry(self, arm: np.ndarray) -> None:
        """A missed grasp was reopened at the commanded arm (7,): with retry="reflex" the
        reflex takes over (`retrying`); with "policy" the chunks retry, aimed as before."""
        if self.reflex is not None:
            self.reflex.start(arm)

    @property
    def retrying(self) -> bool:
        """The re-grasp reflex drives the arm; the chunks wait."""
        return self.reflex is not None and self.reflex.active

    def retry_step(self, targets: list, measured: np.ndarray | None) -> tuple[np.ndarray, float, bool]:
        """A tick of the reflex: the due chunks' target estimates feed its aim, `measured`
        is the arm's joint position (7,) or None. -> (arm (7,), gripper, finished): when
        finished the fingers are closed and the chunks of the next camera pairs drive again,
        with no shift and the grasp check armed until the gripper opens."""
        for target in targets:
            self.reflex.observe(target)
        arm, gripper = self.reflex.step(measured)
        finished = not self.reflex.active
        if finished:
            self.closed, self.target, self.shift = True, None, np.zeros(3)
        return arm, gripper, finished

    def diagnostics(self) -> dict[str, float | int | bool]:
        return {"aim_corrections": self.corrections, "aim_largest_shift_m": round(self.largest_shift, 4),
                "grasps_reopened": self.misses, "regrasp_reflex_active": self.retrying}

    def correct(self, arm: np.ndarray, gripper: float) -> np.ndarray:
        """The arm command (7,) rad with the shift applied; `gripper` is this tick's command (m)."""
        s = self.settings
        arm = np.asarray(arm, dtype=np.float64)
        open_now = bool(gripper > s.open_above)
        if open_now and self.closed:  # opened again: aim the next grasp afresh
            self.closed, self.target = False, None
        elif not open_now:
            self.closed = True
        if ((self.target is None or self.closed) and not np.any(self.shift)) or not np.all(np.isfinite(arm)):
            # Nothing to do (closed with no shift left stays so until the gripper opens: no
            # kinematics through the carry), or nothing to correct (the limiter deals with it).
            return arm
        point, J = self.kinematics.jacobian(arm)
        wanted, step = np.zeros(3), self.step
        if self.closed:
            step = self.release_step
        if self.target is not None:
            height = point[2] - self.target[2]
            if not self.closed:
                gap = self.target[:2] - point[:2]
                norm = float(np.linalg.norm(gap))
                if norm > s.max_shift:
                    gap *= s.max_shift / norm
                weight = float(np.clip((s.start_height - height) / (s.start_height - s.full_height), 0.0, 1.0))
                wanted[:2] = gap * weight
            elif height < s.lift_height:
                wanted = self.shift  # closing or holding low: keep the aim
        change = wanted - self.shift
        norm = float(np.linalg.norm(change))
        self.shift = wanted.copy() if norm <= step else self.shift + change * (step / norm)
        if not np.any(self.shift):
            return arm
        self.corrections += 1
        self.largest_shift = max(self.largest_shift, float(np.linalg.norm(self.shift)))
        dq = J.T @ np.linalg.solve(J @ J.T + s.damping * np.eye(3), self.shift)
        return arm + dq
