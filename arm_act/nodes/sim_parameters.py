"""sim_node's parameters: what it declares, and the settings read from them at start (the
rates, the episode schedule and the world). Only the peer checks (wait_for_controller,
wait_for_recorder, recorder_node, recorder_reports_matches) are read again while the first
episode waits for them; everything else is fixed when the node starts.
"""
from __future__ import annotations

import dataclasses

from arm_act.common import realtime
from arm_act.common.episodes import EpisodeSchedule, parse_blocks
from arm_act.nodes.scheduling import lock_memory_descriptor, read_priority, thread_priority_descriptor
from arm_act.sim import ArmEnv, SimConfig
from arm_act.sim.perturb import perturbation

MODES = ("realtime", "lockstep")


def declare_parameters(node) -> None:
    node.declare_parameter("mode", "realtime")
    node.declare_parameter("real_time_factor", 1.0)
    node.declare_parameter("control_rate", 50)
    node.declare_parameter("joint_state_rate", 100)
    node.declare_parameter("camera_rate", 10)
    node.declare_parameter("seed", 0)
    node.declare_parameter("blocks", "2-5")
    node.declare_parameter("episodes", 0)
    node.declare_parameter("reset_pause", 1.0)
    node.declare_parameter("lockstep_timeout", 10.0)
    node.declare_parameter("gui", False)
    node.declare_parameter("robustness", "")  # a perturbation of arm_act/sim/perturb.py ("" for none)
    node.declare_parameter("task", "box")  # goal family: box, stack, relation or mix (arm_act/sim/instructions.py)
    node.declare_parameter("instruction", "")  # the same instruction every episode ("" for the task's)
    node.declare_parameter("episode_time_limit", 20.0)
    # Start the first episode only once a controller that can drive the arm publishes
    # commands: a managed one (policy_node) must be active (nodes/readiness.py), so a policy
    # that takes seconds to load, or waits to be activated by hand, misses no episode.
    node.declare_parameter("wait_for_controller", True)
    # Start the first episode only once the bag recorder (a node of this name, in this
    # namespace) is subscribed to every topic the sim publishes and to the commands, so
    # a recording holds the whole first episode: our writers have matched its readers,
    # and (recorder_reports_matches) its command readers have matched every command
    # writer in the graph, by its report on <recorder_node>/publishers_matched.
    node.declare_parameter("wait_for_recorder", False)
    node.declare_parameter("recorder_node", "bag_recorder")
    # false: a recorder that sends no such report (not arm_act's bag_recorder).
    node.declare_parameter("recorder_reports_matches", True)
    # After the last of `episodes` (> 0) episodes the process exits 0 (launch files end on it).
    node.declare_parameter("exit_when_done", True)
    # SCHED_FIFO priority of the sim_loop thread (ros2_control's thread_priority; 0: normal).
    node.declare_parameter("thread_priority", realtime.DEFAULT_THREAD_PRIORITY,
                           thread_priority_descriptor("the sim_loop thread"))
    node.declare_parameter("lock_memory", realtime.DEFAULT_LOCK_MEMORY, lock_memory_descriptor())


def env_config_for_rates(control_rate: int, step_rate: int, camera_rate: int) -> SimConfig:
    """The SimConfig whose env.step() lasts one step period (1/step_rate s), with the same
    physics dt as the control-rate config: a lockstep episode over ROS integrates exactly
    as the in-process rollout, and realtime stepping at the joint-state rate changes only
    when states are published, not the physics."""
    base = SimConfig(control_rate_hz=control_rate, camera_rate_hz=camera_rate)
    if step_rate % control_rate or step_rate % camera_rate:
        raise ValueError(f"joint_state_rate={step_rate} must be a multiple of control_rate={control_rate} "
                         f"and camera_rate={camera_rate}")
    config = dataclasses.replace(base, control_rate_hz=step_rate)
    if abs(config.physics_dt - base.physics_dt) > 1e-12:
        raise ValueError(f"joint_state_rate={step_rate}: physics rate {base.physics_rate_hz} Hz does not "
                         f"split into whole steps per joint-state period")
    return config


def step_rate_for(mode: str, control_rate: int, joint_state_rate: int, camera_rate: int,
                  logger) -> tuple[int, SimConfig]:
    """(env steps per second, their SimConfig). Lockstep steps the world one control period per
    command (joint states at the control rate); realtime steps at the joint-state rate and
    commands are applied at the control rate. A joint-state rate that does not fit the other
    rates is warned about and replaced by the control rate."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} must be 'realtime' or 'lockstep'")
    step_rate = control_rate if mode == "lockstep" else joint_state_rate
    try:
        return step_rate, env_config_for_rates(control_rate, step_rate, camera_rate)
    except ValueError as exc:
        logger.warning(f"{exc}; publishing joint states at the control rate")
        return control_rate, env_config_for_rates(control_rate, control_rate, camera_rate)


@dataclasses.dataclass(frozen=True)
class SimSettings:
    """The parameters sim_node reads once, at start."""

    thread_priority: int
    mode: str
    real_time_factor: float
    control_rate: int
    joint_state_rate: int
    camera_rate: int
    step_rate: int
    reset_pause: float
    lockstep_timeout: float
    schedule: EpisodeSchedule
    config: SimConfig
    gui: bool
    robustness: str  # a perturbation of arm_act/sim/perturb.py, "" for none
    task: str = "box"  # the goal family of every episode (box, stack, relation, mix)
    instruction: str = ""  # the same instruction every episode, "" for the task's

    def make_env(self) -> ArmEnv:
        return ArmEnv(self.config, gui=self.gui,
                      perturbation=perturbation(self.robustness) if self.robustness else None,
                      task=self.task, instruction=self.instruction or None)


def read_settings(node) -> SimSettings:
    """The rates, the episode schedule and the world's config, from the declared parameters
    (ValueError with the reason for a bad thread_priority or mode)."""

    def param(name):
        return node.get_parameter(name).value

    thread_priority = read_priority(node)
    mode = str(param("mode"))
    control_rate, camera_rate = int(param("control_rate")), int(param("camera_rate"))
    joint_state_rate = int(param("joint_state_rate"))
    step_rate, config = step_rate_for(mode, control_rate, joint_state_rate, camera_rate, node.get_logger())
    schedule = EpisodeSchedule(seed=int(param("seed")), blocks=parse_blocks(str(param("blocks"))),
                               episodes=int(param("episodes")))
    return SimSettings(
        thread_priority=thread_priority, mode=mode, real_time_factor=float(param("real_time_factor")),
        control_rate=control_rate, joint_state_rate=joint_state_rate, camera_rate=camera_rate, step_rate=step_rate,
        reset_pause=float(param("reset_pause")), lockstep_timeout=float(param("lockstep_timeout")),
        schedule=schedule, config=dataclasses.replace(config, episode_time_limit=float(param("episode_time_limit"))),
        gui=bool(param("gui")), robustness=str(param("robustness")), task=str(param("task")),
        instruction=str(param("instruction")))
