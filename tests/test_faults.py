"""Faults the loop survives, over real DDS: a node that dies and is started again, with the
other nodes left running. Here, sim_node restarted under a running policy_node (as after a
SIGKILL and a new `ros2 run`, or launch's respawn): its clock starts again from zero, and
policy_node must follow the new timeline and command at the control rate again, instead of
waiting for the new sim time to pass the old one."""
from __future__ import annotations

import time

import pytest
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_msgs.msg import Float64MultiArray

from arm_act.ros import conversions as conv
from tests.conftest import spinning, wait_for

pytestmark = pytest.mark.ros


def _params(**values):
    return [Parameter(k, value=v) for k, v in values.items()] + [Parameter("use_sim_time", value=True)]


def test_policy_node_follows_a_restarted_sim_node(ros_context, tiny_checkpoint):
    from arm_act.nodes.policy_node import PolicyNode
    from arm_act.nodes.sim_node import SimNode

    def sim():
        # Short episodes: the old sim is several episodes in when it dies, the new one starts at 0.
        return SimNode(context=ros_context, parameter_overrides=_params(mode="realtime", episode_time_limit=2.0,
                                                                        reset_pause=0.2))

    policy = PolicyNode(context=ros_context, parameter_overrides=_params(checkpoint=str(tiny_checkpoint)))
    probe = Node("probe", context=ros_context)
    commands: list[float] = []
    probe.create_subscription(Float64MultiArray, conv.ARM_COMMAND_TOPIC, lambda m: commands.append(time.monotonic()),
                              100)
    executor = SingleThreadedExecutor(context=ros_context)
    first = sim()
    for node in (first, policy, probe):
        executor.add_node(node)

    def rate_over(seconds: float) -> float:
        start = len(commands)
        time.sleep(seconds)
        return (len(commands) - start) / seconds

    try:
        with spinning(executor):
            assert wait_for(lambda: len(commands) > 100, timeout=60), "no commands before the restart"
            assert wait_for(lambda: first.get_clock().now().nanoseconds > 12e9, timeout=40)
            executor.remove_node(first)
            first.destroy_node()  # the old sim is gone, its sim time at 12 s and more
            time.sleep(0.5)
            second = sim()
            executor.add_node(second)
            restarted = time.monotonic()
            # Commands at the control rate again within 5 s (50 Hz; at least half of it here, on
            # a machine that may be loaded), from chunks inferred on the new sim's camera pairs
            # (10 Hz), not a hold.
            assert wait_for(lambda: second.state == "running", timeout=5), second.waiting
            chunks = policy.chunk_count
            assert wait_for(lambda: sum(t > time.monotonic() - 1.0 for t in commands) >= 25
                            and policy.chunk_count - chunks >= 5, timeout=max(0.1, restarted + 5.0 - time.monotonic()))
            assert rate_over(2.0) >= 25.0
            executor.remove_node(second)
            second.destroy_node()
    finally:
        for node in (policy, probe):
            node.destroy_node()
