"""The executor the node executables spin on (arm_act/ros/node_main.py make_executor):
rclpy's EventsExecutor by default, the SingleThreadedExecutor with ARM_ACT_EXECUTOR=single,
and one line for anything else, in process and from a node executable."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from arm_act.ros.node_main import EXECUTOR_ENV, make_executor

pytestmark = pytest.mark.ros
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("value,kind", [(None, "EventsExecutor"), ("events", "EventsExecutor"),
                                        (" Single ", "SingleThreadedExecutor"), ("", "EventsExecutor")])
def test_the_executor_follows_the_environment(ros_context, monkeypatch, value, kind):
    from rclpy.node import Node
    from std_msgs.msg import String

    if value is None:
        monkeypatch.delenv(EXECUTOR_ENV, raising=False)
    else:
        monkeypatch.setenv(EXECUTOR_ENV, value)
    executor = make_executor(ros_context)
    assert type(executor).__name__ == kind
    # It runs callbacks: a message published on one node reaches a subscription of another.
    got = []
    a, b = Node("executor_a", context=ros_context), Node("executor_b", context=ros_context)
    b.create_subscription(String, "executor_test", lambda msg: got.append(msg.data), 10)
    pub = a.create_publisher(String, "executor_test", 10)
    for node in (a, b):
        executor.add_node(node)
    try:
        for _ in range(100):
            pub.publish(String(data="hello"))
            executor.spin_once(timeout_sec=0.05)
            if got:
                break
        assert got and got[0] == "hello"
    finally:
        executor.shutdown()
        a.destroy_node()
        b.destroy_node()


def test_an_unknown_executor_stops_the_node_with_one_line(ros_context):
    env = dict(os.environ, ROS_DOMAIN_ID=str(ros_context.get_domain_id()), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
               PYTHONPATH=str(ROOT), **{EXECUTOR_ENV: "multi"})
    result = subprocess.run([str(Path(sys.executable).parent / "expert_node")], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "ExpertNode: ARM_ACT_EXECUTOR='multi' must be one of events, single")
    assert "Traceback" not in result.stderr
