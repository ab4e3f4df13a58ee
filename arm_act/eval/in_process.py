"""Closed-loop episodes in process: the policy agent and the runners of `arm-act eval`.

A chunk computed from the camera pair of tick c becomes usable `latency_ticks` control
ticks later (default: this machine's measured median inference latency, rounded up to
whole ticks); until then the previous chunks keep driving the arm. The delay is counted in
ticks, not measured per call, so the same seed gives the same result on any machine; the
rule lives in arm_act.policy.selection.ActionSelector, which policy_node uses too.

    runner = PolicyRunner.load(checkpoint, sim_config, PolicySettings(latency_ticks=1))
    record = runner.run(env, spec)        # one episode -> its record (episode_record)
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arm_act.common.viz import VideoWriter, compose_frame
from arm_act.policy.inference_config import InferenceConfig

logger = logging.getLogger(__name__)
_DEFAULTS = InferenceConfig.defaults()  # the agent's settings have their one default there


LIFTED_Z = 0.08  # m: a block's centre this high above the table is in the gripper (blocks rest at 0.02)


class PolicyAgent:
    """sim.rollout agent around a PolicyRuntime: its commands come from an ActionSelector,
    the one policy_node uses, so ROS and in-process runs execute the same commands."""

    def __init__(self, runtime, latency_ticks: int, video: VideoWriter | None = None,
                 control_rate: float = 50.0, max_joint_speed: float = _DEFAULTS["max_joint_speed"], project=None,
                 assist: bool = _DEFAULTS["assist"], regrasps: int = _DEFAULTS["regrasps"],
                 retry: str = _DEFAULTS["retry"]):
        """project(camera, points (N, 3)) -> pixels (N, 2): draws the target head's guess of
        the named block on the video (optional). assist: the hand-written grasp assist around
        the network (policy_node's `assist`): steer the grasp onto the target head's estimate
        (arm_act.assist.aim) and reopen at most `regrasps` grasps an episode that closed on
        nothing, each retried by `retry` ("reflex", arm_act.assist.regrasp, or "policy": the
        chunks). The runtime's colour balance is the assist's other half (PolicySettings)."""
        from arm_act.assist.panda import panda_aim
        from arm_act.policy.runtime import CommandLimiter
        from arm_act.policy.selection import ActionSelector

        self.runtime = runtime
        self.selector = ActionSelector(runtime, latency_ticks, CommandLimiter(max_joint_speed, control_rate),
                                       aim=panda_aim(control_rate, regrasps, retry) if assist else None)
        self.video = video
        self.chunks = 0
        self.project = project
        # Distance (m) between the target head's guess and the named block, per camera pair.
        self.target_errors: list[float] = []
        # After the goal changed: per camera pair, the guess's distance (m) to the new goal's
        # block and how far it lies toward the old goal's (pull_toward).
        self.first_instruction: str | None = None
        self.after_change: list[float] = []
        self.pulls: list[float] = []  # only where the new goal names another block
        self.lifted: set[str] = set()  # colours of the blocks the arm has lifted this episode

    def reset(self, obs) -> None:
        self.target_errors.clear()
        self.first_instruction = None
        self.after_change.clear()
        self.pulls.clear()
        self.lifted.clear()
        self.selector.reset(obs.joint_state.position)

    def act(self, obs):
        from arm_act.sim.rollout import Command

        for o in obs.objects:
            if o.kind == "block" and o.position[2] > LIFTED_Z:
                self.lifted.add(o.colour)
        held_gripper = self.selector.held[1]  # the command before this tick's, for the video
        arm, gripper = self.selector.select_action(obs.tick, obs.joint_state.position, obs.instruction,
                                                   obs.images, need_attention=self.video is not None)
        if obs.images is not None:
            pred = self.selector.last_prediction
            self.chunks += 1
            truth = named_block_position(obs.objects, obs.instruction)
            if pred.target is not None and truth is not None:
                self.target_errors.append(float(np.linalg.norm(pred.target - truth)))
                self._after_change(obs, pred.target, truth)
            if self.video is not None:
                marks = None
                if pred.target is not None and self.project is not None:
                    marks = {name: self.project(name, pred.target[None])[0] for name in obs.images}
                self.video.write(compose_frame(
                    obs.images, pred.attention, obs.instruction, f"chunk {self.chunks}",
                    held_gripper, float(obs.joint_state.position[7]), obs.time, marks=marks))
        return Command(arm, gripper)

    def partial_progress(self, instruction: str) -> dict:
        """Which blocks the arm lifted: the named one (the grasp part of the task worked) or
        another (it went for the wrong block)."""
        named = set(_named_colours(instruction))
        return {"lifted_named_block": bool(self.lifted & named),
                "lifted_other_block": bool(self.lifted - named)}

    def _after_change(self, obs, target: np.ndarray, truth: np.ndarray) -> None:
        """Under an instruction other than the episode's first, where the target head's guess
        lies between the new goal's block and the old one's (pull_toward)."""
        if self.first_instruction is None:
            self.first_instruction = obs.instruction
        elif obs.instruction != self.first_instruction:
            self.after_change.append(float(np.linalg.norm(target - truth)))
            old = named_block_position(obs.objects, self.first_instruction)
            if old is not None and np.linalg.norm(old[:2] - truth[:2]) > 1e-6:
                self.pulls.append(pull_toward(target, truth, old))

    def grounding(self) -> dict | None:
        """The target head's error (cm) at the first camera pair and its median over the
        episode; after a goal change, the same for the pairs under the new goal with their
        pull toward the old goal's block. None without a target head."""
        if not self.target_errors:
            return None
        found = {"first_cm": round(100 * self.target_errors[0], 2),
                 "median_cm": round(100 * float(np.median(self.target_errors)), 2)}
        if self.after_change:
            found["after_change"] = {"first_cm": round(100 * self.after_change[0], 2),
                                     "median_cm": round(100 * float(np.median(self.after_change)), 2)}
            if self.pulls:
                found["after_change"] |= {"pull_first": round(self.pulls[0], 3),
                                          "pull_median": round(float(np.median(self.pulls)), 3)}
        return found


def pull_toward(point: np.ndarray, new: np.ndarray, old: np.ndarray) -> float:
    """How far `point` lies from the new goal's block toward the old goal's, on the table:
    its horizontal offset from `new` projected on the line from `new` to `old`, as a share
    of that line (0 at the new block, 1 at the old one). benchmarks/goal_change_pull.py
    measures the first grasp the same way."""
    line = np.asarray(old[:2], dtype=np.float64) - np.asarray(new[:2], dtype=np.float64)
    length2 = float(line @ line)
    if length2 == 0.0:
        return 0.0
    return float((np.asarray(point[:2], dtype=np.float64) - new[:2]) @ line / length2)


def _named_colours(instruction: str) -> list[str]:
    """The colour of the block to move (a goal parsed from the instruction, arm_act.sim.instructions),
    else every word of the instruction (words that are no colour match no block)."""
    from arm_act.sim.instructions import Goal, parse_goal

    goal = parse_goal(instruction)
    return [goal.colour] if isinstance(goal, Goal) else instruction.split()


def named_block_position(objects, instruction: str) -> np.ndarray | None:
    """The position of the block to move (the one whose colour a box instruction names; a
    stack or relation instruction's first block), if exactly one block has that colour."""
    words = set(_named_colours(instruction))
    found = [o for o in objects if o.kind == "block" and o.colour in words]
    return np.asarray(found[0].position, dtype=np.float64) if len(found) == 1 else None


CLOSED_COMMAND = 0.02  # m: a gripper command below this closes the fingers (GRIPPER_MAX is 0.04)


class GraspTracker:
    """Grasp attempts of one episode, from the commands and the sim state (on_tick).

    An attempt starts when the gripper command goes from open to closed (< CLOSED_COMMAND)
    and lasts while it stays closed. The first attempt missed when the named block was not
    lifted (centre above LIFTED_Z) before the gripper opened again or the episode ended:
    the fingers closed on nothing, or on a block they did not hold. offset: grasp point
    minus named block (cm) when the first attempt closed; its horizontal length is the grasp
    error that evaluation summaries report (first_grasp_xy_cm). grasps_xy_cm: the horizontal
    grasp error of every attempt when it closed, in order, to see where retries land."""

    def __init__(self, env) -> None:
        self.env = env
        self.grasps = 0
        self.first_held = False
        self.first_offset: list[float] | None = None
        self.xy_cm: list[float | None] = []
        self._closed = False

    def on_tick(self, obs, cmd) -> None:
        block = named_block_position(obs.objects, obs.instruction)
        closed = cmd.gripper < CLOSED_COMMAND
        if closed and not self._closed:
            self.grasps += 1
            offset = None if block is None else self.env.grasp_point() - block
            self.xy_cm.append(None if offset is None else round(100 * math.hypot(*offset[:2]), 2))
            if self.grasps == 1 and offset is not None:
                self.first_offset = [round(100 * float(v), 2) for v in offset]
        if closed and self.grasps == 1 and block is not None and block[2] > LIFTED_Z:
            self.first_held = True
        self._closed = closed

    def record(self) -> dict:
        xy = None if self.first_offset is None else round(math.hypot(*self.first_offset[:2]), 2)
        return {"grasps": self.grasps, "first_grasp_missed": bool(self.grasps >= 1 and not self.first_held),
                "first_grasp_held": bool(self.first_held), "first_grasp_offset_cm": self.first_offset,
                "first_grasp_xy_cm": xy, "grasps_xy_cm": list(self.xy_cm)}


def _ticks(*callbacks):
    """One on_tick callback calling each given one (None ones skipped)."""
    live = [c for c in callbacks if c is not None]

    def on_tick(obs, cmd) -> None:
        for c in live:
            c(obs, cmd)
    return on_tick


def episode_record(result) -> dict:
    """The record of one episode in `arm-act eval`'s results (sim.rollout.EpisodeResult in)."""
    return {
        "seed": result.seed,
        "n_blocks": result.n_blocks,
        "instruction": result.instruction,
        "status": result.status,
        "success": bool(result.success),
        "duration": round(float(result.duration), 4),
    }


class ExpertRunner:
    """Runs one scripted-expert episode (no rendering: the expert reads object poses), its
    perturbation generator seeded by the episode seed (sim.expert.perturbation_rng)."""

    describe = "expert"

    def run(self, env, spec) -> dict:
        from arm_act.sim import perturbation_rng
        from arm_act.sim.rollout import ExpertAgent, run_episode

        agent = ExpertAgent(rng=perturbation_rng(spec.seed))
        tracker = GraspTracker(env)
        try:
            result = run_episode(env, agent, spec.seed, spec.n_blocks, render=False, on_tick=tracker.on_tick)
        finally:
            agent.close()
        return {**episode_record(result), **tracker.record()}


@dataclass(frozen=True)
class PolicySettings(InferenceConfig):
    """How a checkpoint runs in an evaluation: every InferenceConfig setting (one default
    each, policy_node's), and two of evaluation's own. latency_ticks None means: measure this
    machine's inference latency; ideal means zero latency whatever latency_ticks says (the
    ablation)."""

    latency_ticks: int | None = None
    ideal: bool = False

    def __post_init__(self):
        if self.latency_ticks is None:  # measured at load; every other field as InferenceConfig checks it
            InferenceConfig.__post_init__(dataclasses.replace(self, latency_ticks=0))
        else:
            InferenceConfig.__post_init__(self)
        if not isinstance(self.ideal, bool):
            raise ValueError(f"ideal={self.ideal!r} must be true or false")
        from arm_act.policy.device import resolve_device

        resolve_device(self.device)  # DeviceError (a ValueError, one line) when it is not here


class PolicyRunner:
    """Runs one checkpoint episode in process (rendering both cameras), optionally writing a
    video per episode (video_dir/episode_<seed>.mp4) and a bag per episode (bags_dir)."""

    def __init__(self, runtime, checkpoint: Path, sim_config, settings: PolicySettings, latency_ticks: int,
                 measured_latency_s: float | None = None, video_dir: Path | None = None,
                 bags_dir: Path | None = None):
        self.runtime, self.checkpoint, self.sim_config = runtime, Path(checkpoint), sim_config
        self.settings, self.latency_ticks = settings, int(latency_ticks)
        self.video_dir = None if video_dir is None else Path(video_dir)
        self.bags_dir = None if bags_dir is None else Path(bags_dir)
        self.describe = {
            "checkpoint": str(checkpoint),
            "execution": settings.execution,
            "backend": runtime.backend,
            "ensemble_m": settings.ensemble_m,
            "ensemble_m_after_change": settings.ensemble_m_after_change,
            "ensemble_after_change_s": settings.ensemble_after_change_s,
            "gripper": settings.gripper,
            "latency_ticks": self.latency_ticks,
            "measured_latency_ms": None if measured_latency_s is None else round(measured_latency_s * 1e3, 2),
            "ideal": bool(settings.ideal),
            "assist": bool(settings.assist),
            "regrasps": int(settings.regrasps) if settings.assist else 0,
            "retry": settings.retry if settings.assist and settings.regrasps else None,
            "colour_balance": runtime.colour_balance is not None,
        }

    @classmethod
    def load(cls, checkpoint: Path, sim_config, settings: PolicySettings, video_dir: Path | None = None,
             bags_dir: Path | None = None, named: Path | None = None) -> PolicyRunner:
        """Load the checkpoint for the sim's cameras and fix the latency (settings, else
        measured here). named: the checkpoint's name in records and bags when `checkpoint`
        is a copy (a Ray task's). Raises CheckpointError or ValueError for a checkpoint that
        does not load or fit the sim."""
        from arm_act.policy.runtime import PolicyRuntime, latency_warning, measure_latency_ticks

        runtime = PolicyRuntime.from_checkpoint(
            checkpoint, execution=settings.execution, m=settings.ensemble_m, threads=settings.threads,
            cameras=tuple(c.name for c in sim_config.cameras), image_size=sim_config.cameras[0].height,
            backend=settings.backend, device=settings.device, control_rate=sim_config.control_rate_hz,
            colour_balance=settings.assist, m_after_change=settings.ensemble_m_after_change,
            after_change_s=settings.ensemble_after_change_s, gripper=settings.gripper)
        measured = None
        if settings.ideal:
            latency_ticks = 0
        elif settings.latency_ticks is not None:
            latency_ticks = settings.latency_ticks
        else:
            latency_ticks, measured, times = measure_latency_ticks(runtime, sim_config.control_rate_hz)
            logger.info("measured inference latency %.1f ms (median of %d calls) -> %d control ticks",
                        measured * 1e3, len(times), latency_ticks)
            warning = latency_warning(latency_ticks, times, os.getloadavg()[0] / (os.cpu_count() or 1))
            if warning:
                logger.warning(warning)
        return cls(runtime, checkpoint if named is None else named, sim_config, settings, latency_ticks, measured,
                   video_dir, bags_dir)

    def run(self, env, spec) -> dict:
        from arm_act.sim.rollout import run_episode

        video = None
        if self.video_dir is not None:
            video = VideoWriter(self.video_dir / f"episode_{spec.seed}.mp4", fps=self.sim_config.camera_rate_hz)
        agent = PolicyAgent(self.runtime, self.latency_ticks, video=video,
                            control_rate=self.sim_config.control_rate_hz,
                            max_joint_speed=self.settings.max_joint_speed, assist=self.settings.assist,
                            regrasps=self.settings.regrasps, retry=self.settings.retry,
                            project=lambda camera, points: env.camera(camera).project(points))
        recorder = None
        if self.bags_dir is not None:
            from arm_act.bags.episode import EpisodeBagRecorder

            recorder = EpisodeBagRecorder.for_rollout(self.bags_dir, env, spec, policy=str(self.checkpoint))
        tracker = GraspTracker(env)
        try:
            result = run_episode(env, agent, spec.seed, spec.n_blocks, render=True,
                                 on_tick=_ticks(recorder.record_tick if recorder else None, tracker.on_tick))
        finally:
            if video is not None:
                video.close()
        if recorder is not None:
            recorder.finish(result)
        record = episode_record(result)
        record.update(agent.partial_progress(result.instruction))
        record.update(tracker.record())
        record["camera_pairs"] = agent.chunks  # camera frames the policy saw (one chunk each)
        if agent.selector.aim is not None:  # how far the aim correction moved the grasp point (cm)
            record["aim_shift_cm_max"] = round(agent.selector.aim.largest_shift * 100, 2)
            record["grasps_reopened"] = agent.selector.aim.misses
        if agent.grounding() is not None:
            record["target_error"] = agent.grounding()
        return record
