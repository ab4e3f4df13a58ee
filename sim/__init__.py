"""PyBullet simulation of a Franka Panda pick-and-place task (no ROS).

Public API: SimConfig, CameraConfig, ArmEnv, ObjectState,
JointStateArrays, ScriptedExpert, ExpertConfig, perturbation_rng (the expert's seed rule),
parse_instruction, Goal, parse_goal, GoalChange; sim.rollout holds the episode loop.

The names are imported on first use (PEP 562), so that a light submodule such as
arm_act.sim.instructions (goals, phrasings, the parser) imports without PyBullet.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "COLOURS": "arm_act.sim.config", "CameraConfig": "arm_act.sim.config", "SimConfig": "arm_act.sim.config",
    "ArmEnv": "arm_act.sim.env",
    "ExpertConfig": "arm_act.sim.expert", "ScriptedExpert": "arm_act.sim.expert", "Waypoint": "arm_act.sim.expert",
    "WaypointKind": "arm_act.sim.expert", "perturbation_rng": "arm_act.sim.expert",
    "JOINT_NAMES": "arm_act.sim.robot", "JointStateArrays": "arm_act.sim.robot",
    "ObjectState": "arm_act.sim.task", "parse_instruction": "arm_act.sim.task",
    "Goal": "arm_act.sim.instructions", "parse_goal": "arm_act.sim.instructions",
    "GoalChange": "arm_act.sim.goal_change",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
