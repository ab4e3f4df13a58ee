"""The aim correction (arm_act.policy.aim) for the simulated Panda, built from the URDF that
the simulator loads; used by policy_node, in-process evaluation and takeover collection."""
from __future__ import annotations

from arm_act.policy.aim import AimCorrector, AimSettings
from arm_act.sim.backend import panda_urdf_path


def panda_aim(control_rate: float, regrasps: int = AimSettings.regrasps) -> AimCorrector:
    """A fresh corrector for one ActionSelector, at `control_rate` Hz, reopening at most
    `regrasps` grasps an episode that closed on nothing (0: no grasp check)."""
    return AimCorrector.for_urdf(panda_urdf_path(collision_visuals=False), control_rate=control_rate,
                                 settings=AimSettings(regrasps=regrasps))
