"""One in-process episode (sim.rollout.run_episode) written as the bag the live system would
record: the same topics and message types, built by arm_act.ros.conversions, stamped with sim time.

Shared by `arm-act collect` (scripted-expert demonstrations) and `arm-act eval --bags`:

    recorder = EpisodeBagRecorder.for_rollout(out_dir, env, spec, expert="scripted")
    result = run_episode(env, agent, spec.seed, spec.n_blocks, render=True,
                         on_tick=recorder.record_tick)
    recorder.finish(result)

Per control tick k (t_k = start + k / control_rate; start = sim_node's first clock value, as
ROS treats time 0 as unset): camera images + camera_info on camera ticks, objects,
joint_states, /clock, then the agent's arm and gripper commands, all at t_k, as sim_node
and a lockstep controller publish them. /task and /episode ("running") at tick 0; at the
end the final joint state, objects and /episode with the final state. custom_data: seed,
n_blocks, instruction, success, status, rates, plus what the caller passes (expert,
perturb_prob, policy, ...).
"""
from __future__ import annotations

import os
from pathlib import Path

from arm_act.bags.writer import BagWriter, live_topic_specs
from arm_act.ros import conversions as conv
from arm_act.ros.conversions import CLOCK_START

# Topics an in-process rollout has nothing to put on.
_NOT_RECORDED = ("policy/action_chunk", "policy/diagnostics", "policy/attention", "policy/instruction_attention")


def bag_name(seed: int) -> str:
    return f"episode_{seed}"


class EpisodeBagRecorder:
    """Writes one episode into `path` (a new bag directory)."""

    def __init__(self, path: str | os.PathLike, env, spec, metadata: dict | None = None,
                 compression: str | None = None):
        self.env = env
        self.spec = spec
        self.start = CLOCK_START
        self.ticks = 0
        self.frames = 0
        cameras = [camera.name for camera in env.config.cameras]
        self.writer = BagWriter(path, live_topic_specs(cameras, exclude=_NOT_RECORDED), {
            "seed": spec.seed, "n_blocks": spec.n_blocks, "episode": spec.index,
            "control_rate_hz": env.config.control_rate_hz, "camera_rate_hz": env.config.camera_rate_hz,
            **(metadata or {})}, compression, flush_interval_s=None)  # chunking by size: reproducible files
        self._intrinsics: dict = {}
        self._instruction: str | None = None  # the last one written on /task

    @classmethod
    def for_rollout(cls, out_dir: str | os.PathLike, env, spec, *, compression: str | None = None,
                    **metadata) -> EpisodeBagRecorder:
        """The bag out_dir/episode_<seed>; keyword arguments go into custom_data."""
        return cls(Path(out_dir) / bag_name(spec.seed), env, spec, metadata, compression)

    @property
    def path(self) -> Path:
        return self.writer.path

    def _stamp(self, sim_time: float) -> tuple[float, int]:
        seconds = self.start + sim_time
        return seconds, conv.stamp_to_ns(conv.to_stamp(seconds))

    def _episode_info(self, state: str, sim_time: float, instruction: str) -> conv.EpisodeInfo:
        config = self.env.config
        changes = tuple({"time": round(t, 6), "instruction": text} for t, text in getattr(self.env, "goal_changes", ()))
        return conv.EpisodeInfo(episode=self.spec.index, seed=self.spec.seed, n_blocks=self.spec.n_blocks,
                                state=state, instruction=instruction, time=round(sim_time, 6), start=self.start,
                                control_rate=config.control_rate_hz, camera_rate=config.camera_rate_hz,
                                goal_changes=changes or None)

    def _write_state(self, seconds: float, stamp: int, joint_state, objects) -> None:
        write = self.writer.write
        write("/objects", stamp, conv.objects_msg(seconds, objects))
        write("/joint_states", stamp, conv.joint_state_msg(seconds, joint_state.position, joint_state.velocity,
                                                           joint_state.effort, joint_state.names))
        write("/clock", stamp, conv.clock_msg(seconds))

    def record_tick(self, obs, cmd) -> None:
        """run_episode's on_tick callback: the tick's messages, as sim_node and the controller publish them."""
        seconds, stamp = self._stamp(obs.time)
        write = self.writer.write
        if obs.instruction != self._instruction:  # the episode's first, and each goal change (as sim_node)
            write("/task", stamp, conv.task_msg(obs.instruction))
            write("/episode", stamp, conv.episode_msg(self._episode_info("running", obs.time, obs.instruction)))
            self._instruction = obs.instruction
        if obs.images:
            self.frames += 1
            for name, rgb in obs.images.items():
                if name not in self._intrinsics:
                    self._intrinsics[name] = self.env.camera_intrinsics(name)
                write(f"/camera/{name}/image_raw", stamp, conv.image_msg(seconds, rgb, name))
                write(f"/camera/{name}/camera_info", stamp,
                      conv.camera_info_msg(seconds, name, rgb.shape[1], rgb.shape[0], self._intrinsics[name]))
        self._write_state(seconds, stamp, obs.joint_state, obs.objects)
        write(f"/{conv.ARM_COMMAND_TOPIC}", stamp, conv.float_array_msg(cmd.arm))
        write(f"/{conv.GRIPPER_COMMAND_TOPIC}", stamp, conv.float_array_msg([cmd.gripper]))
        self.ticks += 1

    def finish(self, result, **metadata) -> None:
        """The final state and status, then close the bag (complete, success marked);
        keyword arguments are more custom_data entries known only at the end."""
        seconds, stamp = self._stamp(result.duration)
        self._write_state(seconds, stamp, self.env.joint_state(), self.env.objects())
        self.writer.write("/episode", stamp,
                          conv.episode_msg(self._episode_info(result.status, result.duration, result.instruction)))
        for key, value in (("instruction", result.instruction), ("status", result.status),
                           ("success", bool(result.success)), ("ticks", result.ticks), ("frames", self.frames),
                           ("duration_s", round(float(result.duration), 6)), *metadata.items()):
            self.writer.set_metadata(key, value)
        self.writer.close()

    def abort(self, reason: str) -> None:
        """Leave the bag marked incomplete (an exception ended the episode)."""
        self.writer.abort(reason)
