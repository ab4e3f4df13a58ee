"""The pick-and-place task as a Gymnasium environment, in the conventions of LeRobot's
simulated benchmarks (gym-aloha, gym-pusht): observations `pixels` (one uint8 H x W x 3 image
per camera) and `agent_pos`; `info["is_success"]`; `render()` as an rgb_array; the task's
instruction as the env's task description; the control rate as its fps.

    import gymnasium, arm_act.gym
    env = gymnasium.make("arm_act/PickPlace-v0", blocks="2-5", robustness=None)
    obs, info = env.reset(seed=100000)          # the world `arm-act eval --seed 100000` starts with
    obs, reward, terminated, truncated, info = env.step(action)

One step is one control period (1/control_rate s): the action (7 joint targets in rad and
the finger opening in m, 0 .. 0.04) is applied, then the physics advances. The cameras are
rendered on camera ticks (every control_rate/camera_rate steps, from the reset on), as sim_node
and `arm-act eval` render them; between them `pixels` holds the last frame and
`info["new_frame"]` is False. The reward is 1 on the step the named block lands in the box,
else 0; `terminated` when the episode succeeded or failed (a block dropped outside the box),
`truncated` at the time limit.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from arm_act.common.episodes import episode_spec, parse_blocks
from arm_act.policy.runtime import ARM_LOWER, ARM_UPPER, GRIPPER_RANGE

ENV_ID = "arm_act/PickPlace-v0"


class PickPlaceEnv(gym.Env):
    """`blocks`: "N" or "LO-HI" (drawn per episode from the seed, as `arm-act eval --blocks`);
    `robustness`: one of sim.perturb's worlds (push, lighting, camera, distractors, size,
    crowded) or None; `camera_rate` / `control_rate` in Hz; `time_limit` in sim seconds."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, blocks: str = "2-5", robustness: str | None = None, camera_rate: int = 10,
                 control_rate: int = 50, time_limit: float = 20.0, render_mode: str | None = "rgb_array"):
        from arm_act.eval.config import EvalConfig

        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}: only 'rgb_array' (or None) is supported")
        self._config = EvalConfig(blocks=blocks, robustness=robustness, camera_rate=camera_rate,
                                  control_rate=control_rate, time_limit=time_limit)
        self._blocks = parse_blocks(blocks)
        self.render_mode = render_mode
        self.sim = self._config.make_env()  # arm_act.sim.ArmEnv
        self.metadata = {**self.metadata, "render_fps": control_rate}
        self.fps = control_rate
        self.cameras = tuple(c.name for c in self.sim.config.cameras)
        images = {c.name: spaces.Box(0, 255, (c.height, c.width, 3), dtype=np.uint8) for c in self.sim.config.cameras}
        self.observation_space = spaces.Dict({
            "pixels": spaces.Dict(images),
            "agent_pos": spaces.Box(-np.inf, np.inf, (9,), dtype=np.float64),
        })
        low = np.append(ARM_LOWER, GRIPPER_RANGE[0]).astype(np.float32)
        high = np.append(ARM_UPPER, GRIPPER_RANGE[1]).astype(np.float32)
        self.action_space = spaces.Box(low, high, dtype=np.float32)
        self.task = ""
        self.task_description = ""
        self._frames: dict[str, np.ndarray] | None = None
        self._episode_seed: int | None = None

    # --- gymnasium API ------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is None:  # a seed from the env's generator, as any Gymnasium env draws one
            seed = int(self.np_random.integers(0, 2**31 - 1))
        spec = episode_spec(0, int(seed), self._blocks)  # exactly `arm-act eval --seed S`'s first episode
        self.sim.reset(seed=spec.seed, n_blocks=spec.n_blocks)
        self._episode_seed = spec.seed
        self.task = self.task_description = self.sim.instruction
        self._frames = self.sim.render()
        return self._observation(), self._info(new_frame=True)

    def step(self, action):
        if self._frames is None:
            raise RuntimeError("call reset() before step()")
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if action.shape != (8,):
            raise ValueError(f"action has {action.size} values, expected 8 (7 joint targets and the gripper)")
        if not np.all(np.isfinite(action)):
            raise ValueError(f"action has non-finite values: {action.tolist()}")
        self.sim.apply_command(action[:7], float(action[7]))
        self.sim.step()
        new_frame = self.sim.tick % self.sim.config.camera_every == 0
        if new_frame:
            self._frames = self.sim.render()
        status = self.sim.status()
        reward = 1.0 if status == "success" else 0.0
        terminated = status in ("success", "failure")
        truncated = status == "timeout"
        return self._observation(), reward, terminated, truncated, self._info(new_frame)

    def render(self):
        """The front camera's last frame beside the wrist camera's (H x (W * cameras) x 3)."""
        if self._frames is None:
            return None
        return np.concatenate([self._frames[c] for c in self.cameras], axis=1)

    def close(self):
        self.sim.close()

    # --- observation --------------------------------------------------------------------
    def _observation(self) -> dict[str, Any]:
        state = self.sim.joint_state()
        return {"pixels": {c: self._frames[c].copy() for c in self.cameras},
                "agent_pos": np.asarray(state.position, dtype=np.float64).copy()}

    def _info(self, new_frame: bool) -> dict[str, Any]:
        status = self.sim.status()
        return {"is_success": status == "success", "status": status, "task": self.task, "seed": self._episode_seed,
                "n_blocks": self.sim.n_blocks, "tick": self.sim.tick, "time": self.sim.time, "new_frame": new_frame}
