"""The aim correction (arm_act.assist.aim) for the simulated Panda, built from the URDF that
the simulator loads; used by policy_node, in-process evaluation and takeover collection."""
from __future__ import annotations

import functools

from arm_act.assist.aim import AimCorrector, AimSettings
from arm_act.assist.kinematics import ChainKinematics
from arm_act.sim.backend import panda_urdf_path


@functools.cache
def panda_kinematics() -> ChainKinematics:
    """panda_link0 -> panda_grasptarget, read once per process (it holds no state)."""
    return ChainKinematics.from_urdf(panda_urdf_path(collision_visuals=False), "panda_link0", "panda_grasptarget")


def panda_aim(control_rate: float, regrasps: int = AimSettings.regrasps, retry: str = AimSettings.retry
              ) -> AimCorrector:
    """A fresh corrector for one ActionSelector (one per episode in process), at `control_rate`
    Hz, reopening at most `regrasps` grasps an episode that closed on nothing (0: no grasp check),
    each retried by `retry` ("reflex": arm_act.assist.regrasp; "policy": the chunks)."""
    return AimCorrector(panda_kinematics(), control_rate, AimSettings(regrasps=regrasps, retry=retry))
