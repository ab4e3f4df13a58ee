"""Closed-loop evaluation of a checkpoint in process, with an honest latency model.

A chunk computed from the camera pair of tick c becomes usable `latency_ticks` control
ticks later (default: this machine's measured median inference latency, rounded up to
whole ticks); until then the previous chunks keep driving the arm. The delay is counted in
ticks, not measured per call, so the same seed gives the same result on any machine.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from arm_act.cli.main import CommandError
from arm_act.common.viz import VideoWriter, compose_frame

logger = logging.getLogger(__name__)


LIFTED_Z = 0.08  # m: a block's centre this high above the table is in the gripper (blocks rest at 0.02)


class PolicyAgent:
    """sim.rollout agent around a PolicyRuntime: its commands come from an ActionSelector,
    the one policy_node uses, so ROS and in-process runs execute the same commands."""

    def __init__(self, runtime, latency_ticks: int, video: VideoWriter | None = None,
                 control_rate: float = 50.0, max_joint_speed: float = 3.0, project=None):
        """project(camera, points (N, 3)) -> pixels (N, 2): draws the target head's guess of
        the named block on the video (optional)."""
        from arm_act.policy.runtime import CommandLimiter
        from arm_act.policy.selection import ActionSelector

        self.runtime = runtime
        self.selector = ActionSelector(runtime, latency_ticks, CommandLimiter(max_joint_speed, control_rate))
        self.video = video
        self.chunks = 0
        self.project = project
        # Distance (m) between the target head's guess and the named block, per camera pair.
        self.target_errors: list[float] = []
        self.lifted: set[str] = set()  # colours of the blocks the arm has lifted this episode

    def reset(self, obs) -> None:
        self.target_errors.clear()
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
        words = set(instruction.split())
        return {"lifted_named_block": bool(self.lifted & words),
                "lifted_other_block": bool(self.lifted - words)}

    def grounding(self) -> dict | None:
        """The target head's error (cm) at the first camera pair and its median over the
        episode; None without a target head."""
        if not self.target_errors:
            return None
        return {"first_cm": round(100 * self.target_errors[0], 2),
                "median_cm": round(100 * float(np.median(self.target_errors)), 2)}


def named_block_position(objects, instruction: str) -> np.ndarray | None:
    """The position of the block whose colour the instruction names, if exactly one does."""
    words = set(instruction.split())
    found = [o for o in objects if o.kind == "block" and o.colour in words]
    return np.asarray(found[0].position, dtype=np.float64) if len(found) == 1 else None


def make_policy_runner_factory(args, sim_config, checkpoint: Path):
    from arm_act.policy.checkpoint import CheckpointError
    from arm_act.policy.runtime import PolicyRuntime, measure_latency_ticks

    cameras = tuple(c.name for c in sim_config.cameras)
    try:
        runtime = PolicyRuntime.from_checkpoint(
            checkpoint, execution=args.execution, m=args.ensemble_m, threads=args.threads,
            cameras=cameras, image_size=sim_config.cameras[0].height,
            backend=getattr(args, "backend", "torch"),
        )
    except (CheckpointError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    if args.ideal:
        latency_ticks, measured = 0, None
    elif args.latency_ticks is not None:
        latency_ticks, measured = args.latency_ticks, None
    else:
        latency_ticks, measured = measure_latency_ticks(runtime, sim_config.control_rate_hz)
        logger.info("measured inference latency %.1f ms -> %d control ticks", measured * 1e3, latency_ticks)

    class Runner:
        def __init__(self, spec):
            self.spec = spec

        def run(self, env, spec) -> dict:
            from arm_act.cli.eval import episode_record
            from arm_act.sim.rollout import run_episode

            video = None
            if args.video is not None:
                video = VideoWriter(Path(args.video) / f"episode_{spec.seed}.mp4", fps=sim_config.camera_rate_hz)
            agent = PolicyAgent(runtime, latency_ticks, video=video, control_rate=sim_config.control_rate_hz,
                                max_joint_speed=args.max_joint_speed,
                                project=lambda camera, points: env.camera(camera).project(points))
            recorder = None
            if args.bags is not None:
                from arm_act.bags.episode import EpisodeBagRecorder

                recorder = EpisodeBagRecorder.for_rollout(Path(args.bags), env, spec, policy=str(checkpoint))
            try:
                result = run_episode(env, agent, spec.seed, spec.n_blocks, render=True,
                                     on_tick=recorder.on_tick(env, agent) if recorder else None)
            finally:
                if video is not None:
                    video.close()
            if recorder is not None:
                recorder.finish(result)
            record = episode_record(result)
            record.update(agent.partial_progress(result.instruction))
            if agent.grounding() is not None:
                record["target_error"] = agent.grounding()
            return record

    describe = {
        "checkpoint": str(checkpoint),
        "execution": args.execution,
        "backend": runtime.backend,
        "ensemble_m": args.ensemble_m,
        "latency_ticks": latency_ticks,
        "measured_latency_ms": None if measured is None else round(measured * 1e3, 2),
        "ideal": bool(args.ideal),
    }
    return Runner, describe
