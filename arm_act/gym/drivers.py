"""Our agents on the Gymnasium environment: the scripted expert and a checkpoint policy, driven
through `env.step` exactly as the in-process episode loop (arm_act.sim.rollout.run_episode)
drives them, so a seed gives the same episode either way.

    env = gymnasium.make("arm_act/PickPlace-v0")
    driver = PolicyDriver.load(env, Path("checkpoints/default"))   # or ExpertDriver(env)
    record = driver.run_episode(seed=100000)    # {"seed", "success", "status", "steps", ...}
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from arm_act.sim.rollout import Observation


class SimAgentDriver:
    """A sim.rollout agent (reset(obs), act(obs) -> Command) acting through the env. It sees
    what the in-process loop shows it: the images on camera ticks only, the joint state, the
    instruction and (for the expert, which plans from them) the objects."""

    def __init__(self, env, agent):
        self.env, self.agent = env, agent

    @property
    def sim(self):
        return self.env.unwrapped.sim

    def observation(self, obs: dict, info: dict) -> Observation:
        sim = self.sim
        images = {c: obs["pixels"][c] for c in self.env.unwrapped.cameras} if info["new_frame"] else None
        return Observation(sim.tick, sim.time, sim.joint_state(), images, info["task"], sim.objects())

    def action(self, obs: dict, info: dict) -> np.ndarray:
        command = self.agent.act(self.observation(obs, info))
        return np.append(np.asarray(command.arm, dtype=np.float64), float(command.gripper)).astype(np.float32)

    def before_episode(self, seed: int) -> None:
        """A hook for agents that draw per-episode randomness from the seed."""

    def run_episode(self, seed: int) -> dict:
        obs, info = self.env.reset(seed=seed)
        self.before_episode(info["seed"])
        self.agent.reset(self.observation(obs, info))
        steps, done = 0, False
        while not done:
            command = self.agent.act(self.observation(obs, info))
            # float64 as the in-process loop applies it (the action space's float32 would round it)
            action = np.append(np.asarray(command.arm, dtype=np.float64), float(command.gripper))
            obs, _, terminated, truncated, info = self.env.step(action)
            steps, done = steps + 1, terminated or truncated
        return {"seed": info["seed"], "n_blocks": info["n_blocks"], "instruction": info["task"],
                "status": info["status"], "success": bool(info["is_success"]), "steps": steps}


class ExpertDriver(SimAgentDriver):
    """The scripted expert, its perturbation generator seeded by the episode seed (as
    `arm-act eval --policy expert`)."""

    def __init__(self, env):
        super().__init__(env, None)

    def before_episode(self, seed: int) -> None:
        from arm_act.sim import perturbation_rng
        from arm_act.sim.rollout import ExpertAgent

        if self.agent is not None:
            self.agent.close()
        self.agent = ExpertAgent(rng=perturbation_rng(seed))


class PolicyDriver(SimAgentDriver):
    """A checkpoint, run as `arm-act eval` runs it (arm_act.eval.in_process.PolicyAgent)."""

    @classmethod
    def load(cls, env, checkpoint: Path, settings=None) -> PolicyDriver:
        """settings: arm_act.eval.in_process.PolicySettings (default: the network alone, latency
        1 tick, one thread)."""
        from arm_act.eval.in_process import PolicyAgent, PolicySettings
        from arm_act.policy.runtime import PolicyRuntime

        settings = settings or PolicySettings(latency_ticks=1)
        sim = env.unwrapped.sim
        runtime = PolicyRuntime.from_checkpoint(
            checkpoint, execution=settings.execution, m=settings.ensemble_m, threads=settings.threads,
            cameras=env.unwrapped.cameras, image_size=sim.config.cameras[0].height, backend=settings.backend,
            device=settings.device, control_rate=sim.config.control_rate_hz, colour_balance=settings.assist,
            m_after_change=settings.ensemble_m_after_change, after_change_s=settings.ensemble_after_change_s,
            gripper=settings.gripper)
        agent = PolicyAgent(runtime, 0 if settings.ideal else settings.latency_ticks,
                            control_rate=sim.config.control_rate_hz, max_joint_speed=settings.max_joint_speed,
                            assist=settings.assist, regrasps=settings.regrasps, retry=settings.retry)
        return cls(env, agent)
