"""`arm-act eval --over-ros`: the same seeded episodes run through sim_node and the
controller node (policy_node or expert_node) over DDS, in lockstep.

The nodes live in this process on a private rclpy context in their own DDS domain (they
still talk through DDS, as separate processes would). Lockstep makes the result
deterministic, so it must agree episode by episode with the in-process `arm-act eval`
for the same seeds and latency model.
"""
from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

from arm_act.common.progress import progress_bar

if TYPE_CHECKING:
    from arm_act.eval.config import EvalConfig


def run_over_ros(config: EvalConfig, latency_ticks: int, domain_id: int | None = None) -> list[dict]:
    """The episodes of `config` (expert_node for policy "expert", else policy_node with
    config.settings and `latency_ticks`) -> their records, as the in-process runners make them."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from arm_act.nodes.expert_node import ExpertNode
    from arm_act.nodes.sim_node import SimNode

    def params(**values):
        return [Parameter(k, value=v) for k, v in values.items()] + [Parameter("use_sim_time", value=True)]

    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain_id if domain_id is not None else 150 + os.getpid() % 60)
    nodes = []
    try:
        sim = SimNode(context=context, parameter_overrides=params(
            mode="lockstep", episodes=config.episodes, seed=config.seed, blocks=config.blocks,
            control_rate=config.control_rate, camera_rate=config.camera_rate, joint_state_rate=config.control_rate,
            episode_time_limit=config.time_limit, **config.node_task()))
        nodes.append(sim)
        common = dict(mode="lockstep", control_rate=config.control_rate)
        settings = config.settings
        if config.checkpoint is None:
            nodes.append(ExpertNode(context=context, parameter_overrides=params(**common)))
        else:
            from arm_act.nodes.policy_node import PolicyNode

            nodes.append(PolicyNode(context=context, parameter_overrides=params(
                **common, checkpoint=str(config.checkpoint), latency_ticks=latency_ticks,
                execution=settings.execution, ensemble_m=settings.ensemble_m,
                ensemble_m_after_change=settings.ensemble_m_after_change,
                ensemble_after_change_s=settings.ensemble_after_change_s, gripper=settings.gripper,
                torch_threads=settings.threads,
                max_joint_speed=settings.max_joint_speed, backend=settings.backend, assist=settings.assist,
                regrasps=settings.regrasps, regrasp_retry=settings.retry, publish_attention=False)))
        executor = SingleThreadedExecutor(context=context)
        for node in nodes:
            executor.add_node(node)
        # executor.spin() serves every ready callback per round; spin_once() from this loop
        # served one, and a lockstep tick needs about ten (measured: 72 ms per tick).
        spinner = threading.Thread(target=executor.spin, name="eval_over_ros", daemon=True)
        spinner.start()
        with progress_bar(total=config.episodes, desc="eval over ROS", unit="ep") as bar:
            done = 0
            while len(sim.finished) < config.episodes:
                if sim.failed:
                    raise RuntimeError("sim_node failed; see its log")
                time.sleep(0.05)  # polling progress; the nodes run on the spinner thread
                if len(sim.finished) > done:
                    bar.update(len(sim.finished) - done)
                    done = len(sim.finished)
        executor.shutdown(timeout_sec=5.0)
        spinner.join(timeout=5.0)
        return [{
            "seed": info.seed, "n_blocks": info.n_blocks, "instruction": info.instruction,
            "status": info.state, "success": info.state == "success", "duration": round(info.time, 4),
            **config.goal_fields(info.instruction),
        } for info in sim.finished]
    finally:
        for node in nodes:
            node.destroy_node()
        if context.ok():
            rclpy.shutdown(context=context)
