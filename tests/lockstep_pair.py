"""One episode of sim_node + policy_node in lockstep over DDS, and the same episode in
process with the same runtime settings: shared by the policy-node and shipped-policy tests."""
from __future__ import annotations

import numpy as np
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState

from arm_act.ros import conversions as conv
from tests.conftest import spin_until


def run_lockstep_pair(context, checkpoint, seed: int, time_limit: float, latency_ticks: int = 1, threads: int = 1):
    """-> (episode info from sim_node, in-process EpisodeResult, {tick: ROS joint positions},
    {tick: in-process joint positions}), each over the whole episode. Equal torch thread
    counts make inference identical. The probe is matched by the sim's joint-state publisher
    before the policy node exists, and the sim waits for a controller, so it sees every tick."""
    from arm_act.eval.in_process import PolicyAgent
    from arm_act.nodes.policy_node import PolicyNode
    from arm_act.nodes.sim_node import SimNode
    from arm_act.policy.runtime import PolicyRuntime
    from arm_act.sim import ArmEnv, SimConfig
    from arm_act.sim.rollout import run_episode

    def params(**values):
        return [Parameter(k, value=v) for k, v in values.items()] + [Parameter("use_sim_time", value=True)]

    probe = Node("probe", context=context)
    states = {}
    probe.create_subscription(JointState, "joint_states",
                              lambda m: states.setdefault(conv.stamp_to_ns(m.header.stamp), np.array(m.position)), 100)
    sim = SimNode(context=context, parameter_overrides=params(
        mode="lockstep", episodes=1, seed=seed, blocks="2-5", episode_time_limit=time_limit))
    (joint_pub,) = [p for p in sim.publishers if p.topic_name == "/joint_states"]
    executor = SingleThreadedExecutor(context=context)
    nodes = [probe, sim]
    for node in nodes:
        executor.add_node(node)
    try:
        assert spin_until(executor, lambda: joint_pub.get_subscription_count() > 0, timeout=30)
        policy = PolicyNode(context=context, parameter_overrides=params(
            mode="lockstep", checkpoint=str(checkpoint), latency_ticks=latency_ticks, torch_threads=threads))
        nodes.append(policy)
        executor.add_node(policy)
        assert spin_until(executor, lambda: sim.finished, timeout=120)
        (info,) = sim.finished
        # One joint state per control tick (lockstep does not publish the final state as a tick).
        ticks = round(info.time * info.control_rate)
        assert spin_until(executor, lambda: len(states) >= ticks, timeout=10)
    finally:
        for node in nodes:
            node.destroy_node()
        executor.shutdown()
    env = ArmEnv(SimConfig(episode_time_limit=time_limit))
    trajectory = {}
    try:
        agent = PolicyAgent(PolicyRuntime.from_checkpoint(checkpoint, threads=threads), latency_ticks=latency_ticks)
        result = run_episode(env, agent, info.seed, info.n_blocks,
                             on_tick=lambda o, c: trajectory.setdefault(o.tick, o.joint_state.position.copy()))
    finally:
        env.close()
    ros = {info.tick_of(stamp): q for stamp, q in states.items()}
    return info, result, ros, trajectory
