"""The executor the node executables spin on (arm_act/ros/node_main.py make_executor):
rclpy's EventsExecutor by default, the SingleThreadedExecutor with ARM_ACT_EXECUTOR=single,
and one line for anything else, in process and from a node executable; a node with a
(msg, info) callback, which the EventsExecutor cannot call, is refused in one line."""
from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from arm_act.ros.node_main import (
    EXECUTOR_ENV,
    make_executor,
    refuse_message_info_callbacks,
    run_node,
    takes_message_info,
)

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


@pytest.mark.parametrize("executable,name", [("sim_node", "SimNode"), ("bag_recorder", "bag_recorder")])
def test_an_unknown_dds_transport_stops_the_node_with_one_line(ros_context, executable, name):
    env = dict(os.environ, ROS_DOMAIN_ID=str(ros_context.get_domain_id()), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
               PYTHONPATH=str(ROOT), ARM_ACT_DDS_TRANSPORT="tcp")
    result = subprocess.run([str(Path(sys.executable).parent / executable)], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == f"{name}: ARM_ACT_DDS_TRANSPORT='tcp' must be one of udp, shm"
    assert "Traceback" not in result.stderr


class _Stamps:
    def with_info(self, msg, info):
        pass

    def message_only(self, msg):
        pass


def test_takes_message_info_follows_rclpy_s_rule():
    stamps = _Stamps()
    assert takes_message_info(stamps.with_info) and takes_message_info(lambda msg, info: None)
    assert not takes_message_info(stamps.message_only) and not takes_message_info(lambda msg: None)
    assert not takes_message_info(lambda msg, info=None: None)  # rclpy calls it with the message only
    assert not takes_message_info(lambda *args: None)
    assert takes_message_info(functools.partial(lambda topic, msg, info: None, "/clock"))
    assert not takes_message_info(lambda: None)


def _spin_to_first_message(executor, publish, got) -> None:
    for _ in range(100):
        publish()
        executor.spin_once(timeout_sec=0.05)
        if got:
            return


def test_the_events_executor_cannot_call_a_callback_that_takes_message_info(ros_context):
    """Why the refusal exists: the wheels' EventsExecutor raises instead of calling it. Should a
    later rclpy fix this, this test fails, and refuse_message_info_callbacks can go."""
    from rclpy.experimental import EventsExecutor
    from rclpy.node import Node
    from std_msgs.msg import String

    node = Node("executor_info", context=ros_context)
    got = []
    node.create_subscription(String, "executor_info", lambda msg, info: got.append(info), 10)
    pub = node.create_publisher(String, "executor_info", 10)
    executor = EventsExecutor(context=ros_context)
    executor.add_node(node)
    try:
        with pytest.raises(SystemError):
            _spin_to_first_message(executor, lambda: pub.publish(String(data="x")), got)
        assert got == []
    finally:
        executor.shutdown()
        node.destroy_node()


def test_a_callback_that_takes_message_info_is_refused_on_the_events_executor_only(ros_context, monkeypatch):
    from rclpy.node import Node
    from std_msgs.msg import String

    node = Node("executor_refusal", context=ros_context)
    node.create_subscription(String, "plain", lambda msg: None, 10)
    node.create_subscription(String, "stamped", lambda msg, info: None, 10)
    node.create_subscription(String, "/clock_like", _Stamps().with_info, 10)
    executors = []
    try:
        monkeypatch.setenv(EXECUTOR_ENV, "events")
        executors.append(make_executor(ros_context))
        with pytest.raises(ValueError) as raised:
            refuse_message_info_callbacks(executors[-1], node)
        assert str(raised.value) == ("the subscriptions to /clock_like, /stamped take (msg, info), which rclpy's "
                                     "EventsExecutor cannot call; start the node with ARM_ACT_EXECUTOR=single")
        # The SingleThreadedExecutor calls them: nothing refused, and the info arrives.
        monkeypatch.setenv(EXECUTOR_ENV, "single")
        executors.append(make_executor(ros_context))
        single = executors[-1]
        refuse_message_info_callbacks(single, node)
        got = []
        node.create_subscription(String, "stamped_check", lambda msg, info: got.append(info), 10)
        pub = node.create_publisher(String, "stamped_check", 10)
        single.add_node(node)
        _spin_to_first_message(single, lambda: pub.publish(String(data="x")), got)
        assert got and int(got[0]["source_timestamp"]) > 0
    finally:
        # Shut down whatever was made, also when an assertion above failed, so the next
        # test's context does not inherit an executor still holding this node.
        for executor in executors:
            executor.shutdown()
        node.destroy_node()


class _StampingNode:
    """Made by run_node: a node with one (msg, info) subscription, done at once (without the
    refusal, run_node would spin it once and return 0)."""

    def __new__(cls):
        from rclpy.node import Node
        from std_msgs.msg import String

        node = Node("stamping_node")
        node.create_subscription(String, "stamped", lambda msg, info: None, 10)
        node.done = threading.Event()
        node.done.set()
        return node


def test_run_node_refuses_such_a_node_in_one_line_before_it_spins(monkeypatch, capfd):
    monkeypatch.setenv(EXECUTOR_ENV, "events")
    monkeypatch.setenv("ROS_DOMAIN_ID", "232")  # conftest.py: 100-229; test_private_domain 230, test_processes 231
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    # rmw's own transport: the UDP profile would otherwise be put into this process's environment
    monkeypatch.setenv("ARM_ACT_DDS_TRANSPORT", "shm")
    assert run_node(_StampingNode, args=["stamping_node"]) == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert err == ["_StampingNode: the subscriptions to /stamped take (msg, info), which rclpy's EventsExecutor "
                   "cannot call; start the node with ARM_ACT_EXECUTOR=single"]


EARLY = """
import os, sys, threading
from arm_act.ros.node_main import EARLY_NODE, run_node


class Late:
    def __new__(cls):
        from rclpy.node import Node

        node = Node("late_node")
        node.done = threading.Event()
        node.done.set()
        return node


def load():
    # What the executables' NodeLoader does here is import the node's module (seconds).
    from rclpy.node import Node

    look = Node("look", enable_rosout=False, start_parameter_services=False)
    print("nodes while loading:", sorted(look.get_node_names()))
    look.destroy_node()
    threads = {open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")}
    print("transports:", sorted({t.split(".")[1] for t in threads if t.startswith(("dds.udp.", "dds.shm."))}))
    return Late


load.__name__ = "Late"
sys.exit(run_node(load, args=["late", "--ros-args", "-r", "__node:=renamed"], use_sim_time=False))
"""


def test_an_executable_starts_dds_before_it_imports_its_node(ros_context):
    """run_node given a loader (what the executables pass) makes the DDS participant before
    calling it, through a hidden node that ignores the command line's remappings, over UDP
    only (arm_act/ros/transport.py); the node then comes up as usual and the process exits 0."""
    env = dict(os.environ, ROS_DOMAIN_ID=str(ros_context.get_domain_id()), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    for name in ("ARM_ACT_DDS_TRANSPORT", "FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE"):
        env.pop(name, None)
    result = subprocess.run([sys.executable, "-c", EARLY], env=env, capture_output=True, text=True, timeout=60,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "nodes while loading: ['_arm_act_starting', 'renamed']" in result.stdout, result.stdout
    assert "transports: ['udp']" in result.stdout, result.stdout
