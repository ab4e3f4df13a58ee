"""The shipped checkpoint: it loads strictly and fits the sim's cameras, and one full episode
of sim_node + policy_node in lockstep over DDS follows the in-process runtime tick for tick
(same joint states, bit for bit, and the same outcome)."""
import numpy as np
import pytest
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState

from arm_act import conversions as conv
from arm_act.paths import default_checkpoint
from arm_act.policy_node import PolicyNode
from arm_act.sim_node import SimNode
from policy.checkpoint import load_checkpoint, read_metrics
from tests.conftest import spin_until

SEED = 100003  # an evaluation seed: never used for training
TIME_LIMIT = 3.0  # sim seconds: a short episode keeps the test quick


def test_shipped_checkpoint_loads_and_fits_the_sim():
    from sim import SimConfig

    model, _, config = load_checkpoint(default_checkpoint())
    sim = SimConfig()
    assert tuple(config.cameras) == tuple(c.name for c in sim.cameras)
    assert config.image_size == sim.cameras[0].width == sim.cameras[0].height
    assert read_metrics(default_checkpoint())["data"]["episodes"] >= 100
    assert sum(p.numel() for p in model.parameters()) * 4 < 20e6  # the weights stay under 20 MB


def test_shipped_policy_lockstep_episode_over_ros_matches_in_process(ros_context):
    from arm_act.policy_eval import PolicyAgent
    from policy.runtime import PolicyRuntime
    from sim import ArmEnv, SimConfig
    from sim.rollout import run_episode

    probe = Node("probe", context=ros_context)
    states = {}
    probe.create_subscription(JointState, "joint_states",
                              lambda m: states.setdefault(conv.stamp_to_ns(m.header.stamp), np.array(m.position)), 100)
    params = [Parameter("use_sim_time", value=True), Parameter("mode", value="lockstep")]
    sim = SimNode(context=ros_context, parameter_overrides=params + [
        Parameter("episodes", value=1), Parameter("seed", value=SEED), Parameter("blocks", value="2-5"),
        Parameter("episode_time_limit", value=TIME_LIMIT)])
    policy = PolicyNode(context=ros_context, parameter_overrides=params + [
        Parameter("latency_ticks", value=1), Parameter("torch_threads", value=1)])
    executor = SingleThreadedExecutor(context=ros_context)
    for node in (probe, sim, policy):
        executor.add_node(node)
    try:
        assert spin_until(executor, lambda: sim.finished, timeout=120)
    finally:
        for node in (probe, sim, policy):
            node.destroy_node()
        executor.shutdown()
    (ros,) = sim.finished
    env = ArmEnv(SimConfig(episode_time_limit=TIME_LIMIT))
    trajectory = {}
    try:
        agent = PolicyAgent(PolicyRuntime.from_checkpoint(default_checkpoint(), threads=1), latency_ticks=1)
        result = run_episode(env, agent, ros.seed, ros.n_blocks,
                             on_tick=lambda o, c: trajectory.setdefault(o.tick, o.joint_state.position.copy()))
    finally:
        env.close()
    assert (result.status, result.duration) == (ros.state, pytest.approx(ros.time, abs=1e-9))
    by_tick = {ros.tick_of(stamp): q for stamp, q in states.items()}
    common = sorted(set(by_tick) & set(trajectory))
    assert len(common) >= 0.9 * result.ticks
    for tick in common:
        np.testing.assert_array_equal(by_tick[tick], trajectory[tick], err_msg=f"tick {tick}")
