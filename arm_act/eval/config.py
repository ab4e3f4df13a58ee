"""One evaluation run's settings (EvalConfig), validated on construction; arm_act.eval.evaluate
runs it, and the live and over-ROS runners read it."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from arm_act.common.episodes import parse_blocks
from arm_act.eval.in_process import PolicySettings

EXPERT = "expert"


@dataclass(frozen=True)
class EvalConfig:
    """One evaluation run. policy: "expert" or a checkpoint directory; blocks: "N" or "LO-HI";
    video and bags (directories) apply to in-process runs of a checkpoint. task: the goal
    family of every episode (box | stack | relation | mix, arm_act.sim.instructions);
    instruction: the same words for every episode instead (each episode refuses them, with
    a ValueError, when its blocks do not fit them). change_goal: "AT_S:TO", a goal change
    inside every in-process episode (arm_act.sim.goal_change.GoalChange; docs/tasks.md)."""

    policy: str | Path = EXPERT
    episodes: int = 20
    seed: int = 1000
    blocks: str = "2-5"
    camera_rate: int = 10
    control_rate: int = 50
    time_limit: float = 20.0
    over_ros: bool = False
    video: Path | None = None
    bags: Path | None = None
    settings: PolicySettings = field(default_factory=PolicySettings)
    ray: str | None = None
    robustness: str | None = None  # a perturbation of arm_act.sim.perturb (ROBUSTNESS), None: the plain world
    live: bool = False  # the live nodes as child processes in real time (arm_act.eval.live)
    compare_in_process: bool = False  # with live: the same seeds in process too, side by side
    logs: Path | None = None  # with live: the nodes' logs go here (default: a temporary directory)
    real_time_factor: float = 1.0  # with live: sim_node's; below 1 gives the nodes slack on a loaded machine
    workers: int = 1  # local processes for in-process episodes, each with its own env and policy
    task: str = "box"
    instruction: str | None = None
    phrasing: str = "canonical"  # the words of each episode's goal (arm_act.sim.instructions.PHRASINGS)
    change_goal: str | None = None

    def __post_init__(self):
        from arm_act.sim.instructions import PHRASINGS, TASKS, parse_goal_or_raise

        if self.phrasing not in PHRASINGS:
            raise ValueError(f"phrasing={self.phrasing!r} must be one of {', '.join(PHRASINGS)}")
        if self.phrasing != "canonical" and self.instruction is not None:
            raise ValueError("phrasing draws each goal's words; a fixed instruction has its own")

        parse_blocks(self.blocks)  # raises ValueError quoting the text
        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r} must be one of {', '.join(TASKS)}")
        if self.instruction is not None:
            parse_goal_or_raise(self.instruction)  # ... and for words that give no goal at all
        if self.phrasing != "canonical" and (self.over_ros or self.live):
            raise ValueError(f"phrasing={self.phrasing!r} runs in process (or on Ray); sim_node words each goal "
                             "canonically (give --instruction for other words)")
        if self.change_goal is not None:
            self.goal_change()  # ValueError for a bad AT_S:TO
            if self.over_ros or self.live:
                raise ValueError("change_goal schedules the change in process (or on Ray); over ROS publish the "
                                 "new instruction on `task` (docs/tasks.md)")
            if self.robustness == "crowded":
                raise ValueError("robustness='crowded' repeats colours; a goal change names blocks by colour")
        if not self.plain_task and self.robustness == "crowded":
            raise ValueError("robustness='crowded' repeats colours; it runs the box task only")
        self.sim_config()  # ... and for bad rates or time limits
        self.perturbation()  # ... and for an unknown robustness name
        if self.robustness is not None and self.over_ros:
            raise ValueError(f"robustness={self.robustness!r} runs in process (or on Ray); sim_node has no "
                             "perturbations")
        if self.live and (self.over_ros or self.ray is not None or self.robustness is not None
                          or self.video is not None or self.bags is not None):
            raise ValueError("live runs the plain world through the nodes in real time; it does not combine with "
                             "over_ros (lockstep), ray, robustness, video or bags (record a bag with arm-act demo)")
        if not (math.isfinite(self.real_time_factor) and self.real_time_factor > 0):
            raise ValueError(f"real_time_factor={self.real_time_factor} must be > 0 (live runs in real time)")
        if self.compare_in_process and not self.live:
            raise ValueError("compare_in_process compares a live run with the in-process one: it needs live")
        if self.episodes < 1:
            raise ValueError(f"episodes={self.episodes} must be >= 1")
        if self.workers < 1:
            raise ValueError(f"workers={self.workers} must be >= 1")
        if self.workers > 1 and (self.over_ros or self.live or self.ray is not None):
            raise ValueError(f"workers={self.workers} runs in-process episodes in local processes; over_ros and "
                             "live run them through nodes, and ray spreads them over Ray's own workers")
        if self.ray is not None and self.over_ros:
            raise ValueError("ray runs in-process episodes as tasks; over_ros runs them through nodes here")
        if self.ray is not None and self.settings.device != "cpu":
            raise ValueError(f"device={self.settings.device!r}: Ray tasks run the policy on a CPU each; "
                             "the device applies to a local evaluation")
        if self.over_ros and (self.video is not None or self.bags is not None):
            raise ValueError("video and bags apply to in-process evaluation; record a bag with bag_recorder")
        if self.policy != EXPERT and not Path(self.policy).is_dir():
            raise ValueError(f"policy={str(self.policy)!r} is neither 'expert' nor a checkpoint directory")

    @property
    def plain_task(self) -> bool:
        """The box task in its own words: the records and summary are exactly as before
        task families existed (no family, goal or per-family figures)."""
        return self.task == "box" and self.instruction is None and self.phrasing == "canonical"

    def node_task(self) -> dict:
        """sim_node's parameters for this run's goals (none for the plain box task)."""
        return {} if self.plain_task else {"task": self.task, "instruction": self.instruction or ""}

    def goal_fields(self, instruction: str) -> dict:
        """What an over-ROS or live record adds to the sim's episode for a goal outside the
        plain box task, as the in-process records carry them: the family and the goal,
        read back from the episode's instruction."""
        from arm_act.sim.instructions import parse_goal_or_raise

        if self.plain_task:
            return {}
        goal = parse_goal_or_raise(instruction)
        return {"family": goal.family, "goal": goal.to_dict()}

    @property
    def checkpoint(self) -> Path | None:
        return None if self.policy == EXPERT else Path(self.policy)

    def perturbation(self):
        """The sim.perturb config of `robustness` (None without one)."""
        if self.robustness is None:
            return None
        from arm_act.sim.perturb import perturbation

        return perturbation(self.robustness)

    def goal_change(self):
        """The sim.goal_change.GoalChange of change_goal (None without one)."""
        from arm_act.sim.goal_change import GoalChange

        return GoalChange.optional(self.change_goal)

    def make_env(self):
        from arm_act.sim import ArmEnv

        return ArmEnv(self.sim_config(), perturbation=self.perturbation(), task=self.task,
                      instruction=self.instruction, phrasing=self.phrasing, goal_change=self.goal_change())

    def sim_config(self):
        from arm_act.sim import SimConfig

        return SimConfig(control_rate_hz=self.control_rate, camera_rate_hz=self.camera_rate,
                         episode_time_limit=self.time_limit)
