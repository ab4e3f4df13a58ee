"""The one in-process episode loop (expert eval, policy eval, data collection).

At tick k: obs = Observation(...); cmd = agent.act(obs); on_tick(obs, cmd);
env.apply_command(cmd); env.step(); stop when env.status() != "running".
Camera images are rendered only on camera ticks (every control_rate/camera_rate ticks,
starting at tick 0) and only when render=True; otherwise obs.images is None.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from arm_act.sim.config import SimConfig
from arm_act.sim.env import ArmEnv
from arm_act.sim.expert import ExpertConfig, ScriptedExpert, perturbation_rng
from arm_act.sim.instructions import Goal
from arm_act.sim.robot import JointStateArrays
from arm_act.sim.task import ObjectState

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Observation:
    """What an agent sees at one tick. images: {camera: (H, W, 3) uint8} or None."""

    tick: int
    time: float
    joint_state: JointStateArrays
    images: dict[str, np.ndarray] | None
    instruction: str
    objects: list[ObjectState]


@dataclass(frozen=True)
class Command:
    """arm: (7,) absolute joint targets (rad); gripper: finger opening (m, 0..0.04)."""

    arm: np.ndarray
    gripper: float


@dataclass(frozen=True)
class EpisodeResult:
    seed: int
    n_blocks: int
    instruction: str
    status: str
    success: bool
    duration: float
    """Simulated seconds."""
    ticks: int
    goal: Goal | None = None
    """The episode's goal (the family, the blocks and the relation the instruction names);
    after a goal change, the new one."""
    goal_changes: tuple[tuple[float, str], ...] = ()
    """(sim s since reset, instruction) of each goal change in the episode (ArmEnv.goal_changes)."""


class Agent(Protocol):
    def reset(self, obs: Observation) -> None: ...

    def act(self, obs: Observation) -> Command: ...


def observe(env: ArmEnv, render: bool) -> Observation:
    """The observation of the env's current tick (images only on camera ticks)."""
    images = env.render() if render and env.tick % env.config.camera_every == 0 else None
    return Observation(env.tick, env.time, env.joint_state(), images, env.instruction, env.objects())


def run_episode(env: ArmEnv, agent: Agent, seed: int, n_blocks: int, *, render: bool = True,
                on_tick: Callable[[Observation, Command], None] | None = None) -> EpisodeResult:
    """Reset env with (seed, n_blocks) and run `agent` until the status is terminal."""
    env.reset(seed=seed, n_blocks=n_blocks)
    obs = observe(env, render)
    agent.reset(obs)
    status = env.status()
    while status == "running":
        cmd = agent.act(obs)
        if on_tick is not None:
            on_tick(obs, cmd)
        env.apply_command(cmd.arm, cmd.gripper)
        env.step()
        status = env.status()
        if status == "running":
            obs = observe(env, render)
    return EpisodeResult(seed, n_blocks, env.instruction, status, status == "success", env.time, env.tick, env.goal,
                         tuple(env.goal_changes))


class ExpertAgent:
    """Wraps ScriptedExpert as an agent; it reads ground-truth object poses (obs.objects).
    A new instruction in an observation (a goal changed mid-episode) re-plans the expert
    from that tick's state (ScriptedExpert.retarget)."""

    def __init__(self, config: ExpertConfig | None = None, rng: np.random.Generator | None = None) -> None:
        self.expert = ScriptedExpert(config, rng=rng)
        self.instruction: str | None = None

    def reset(self, obs: Observation) -> None:
        self.expert.reset(obs.instruction, obs.objects, obs.joint_state.position)
        self.instruction = obs.instruction

    def act(self, obs: Observation) -> Command:
        if obs.instruction != self.instruction:
            self.expert.retarget(obs.instruction, obs.objects, obs.joint_state.position)
            self.instruction = obs.instruction
        arm, gripper = self.expert.act(obs.time, obs.joint_state.position, obs.objects)
        return Command(arm, gripper)

    def close(self) -> None:
        self.expert.close()


def run_expert_episodes(seeds: Iterable[int], blocks: int | Callable[[int], int], *,
                        config: SimConfig | None = None, expert_config: ExpertConfig | None = None,
                        render: bool = False,
                        progress: Callable[[EpisodeResult], None] | None = None) -> list[EpisodeResult]:
    """Run the scripted expert over seeds; `blocks` is a count or a function seed -> count.

    The perturbation generator (if expert_config.perturb_prob > 0) is
    perturbation_rng(seed), so results depend on the seed only."""
    env = ArmEnv(config)
    results = []
    try:
        for seed in seeds:
            agent = ExpertAgent(expert_config, rng=perturbation_rng(seed))
            n = blocks(seed) if callable(blocks) else blocks
            t0 = time.perf_counter()
            try:
                result = run_episode(env, agent, seed, n, render=render)
            finally:
                agent.close()
            logger.debug("seed %d: %s in %.1f s sim, %.2f s wall", seed, result.status, result.duration,
                         time.perf_counter() - t0)
            results.append(result)
            if progress is not None:
                progress(result)
    finally:
        env.close()
    return results
