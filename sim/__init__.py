"""PyBullet simulation of a Franka Panda pick-and-place task (no ROS).

Public API: SimConfig, CameraConfig, ArmEnv, ObjectState,
JointStateArrays, ScriptedExpert, ExpertConfig, perturbation_rng (the expert's seed rule),
parse_instruction; sim.rollout holds the episode loop.
"""

from arm_act.sim.config import COLOURS, CameraConfig, SimConfig
from arm_act.sim.env import ArmEnv
from arm_act.sim.expert import ExpertConfig, ScriptedExpert, Waypoint, WaypointKind, perturbation_rng
from arm_act.sim.robot import JOINT_NAMES, JointStateArrays
from arm_act.sim.task import ObjectState, parse_instruction

__all__ = ["COLOURS", "JOINT_NAMES", "ArmEnv", "CameraConfig", "ExpertConfig", "JointStateArrays",
           "ObjectState", "ScriptedExpert", "SimConfig", "Waypoint", "WaypointKind", "parse_instruction",
           "perturbation_rng"]
