"""sim_node's wait_for_recorder and bag_recorder's matching report, over real DDS: the first
episode waits until the recorder's command readers have matched every command writer the
graph shows, not only until its subscriptions exist (a controller's writer shows in sim_node's
graph before the recorder's reader has matched it; what it sends until then is not recorded)."""
from __future__ import annotations

import json

import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_msgs.msg import Float64MultiArray, String

from arm_act.nodes.bag_recorder import BagRecorder
from arm_act.nodes.sim_node import SimNode
from arm_act.ros import conversions as conv
from arm_act.ros.qos import TRANSIENT_LOCAL
from tests.conftest import spinning, wait_for

pytestmark = pytest.mark.ros

ARM = "/" + conv.ARM_COMMAND_TOPIC
GRIPPER = "/" + conv.GRIPPER_COMMAND_TOPIC


class _LateMatchingRecorder(BagRecorder):
    """A recorder whose command readers have not matched the controller yet (the race): it
    reports 0 for them until `matching` is set."""

    matching = False

    def matched_publishers(self) -> dict[str, int]:
        matched = super().matched_publishers()
        if not self.matching:
            matched.update({topic: 0 for topic in (ARM, GRIPPER) if topic in matched})
        return matched


def _controller(context) -> Node:
    node = Node("fake_controller", context=context)
    node.create_publisher(Float64MultiArray, conv.ARM_COMMAND_TOPIC, 10)
    node.create_publisher(Float64MultiArray, conv.GRIPPER_COMMAND_TOPIC, 10)
    return node


def test_first_episode_waits_until_the_recorder_matched_the_controller(ros_context, tmp_path):
    sim_time = Parameter("use_sim_time", value=True)
    sim = SimNode(context=ros_context, parameter_overrides=[
        sim_time, Parameter("mode", value="lockstep"), Parameter("episodes", value=1),
        Parameter("episode_time_limit", value=0.5), Parameter("wait_for_recorder", value=True)])
    recorder = _LateMatchingRecorder(context=ros_context, parameter_overrides=[
        sim_time, Parameter("bag_path", value=str(tmp_path / "bag"))])
    controller = _controller(ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    for node in (sim, recorder, controller):
        executor.add_node(node)
    try:
        with spinning(executor):
            # Everything else is in place: only the recorder's command readers are unmatched,
            # and the log line says which.
            unmatched = f"{ARM} (its reader has matched 0 of 1 publishers)"
            assert wait_for(lambda: sim.state == "waiting" and len(sim.waiting) == 1
                            and unmatched in sim.waiting[0], timeout=20), sim.waiting
            assert f"{GRIPPER} (its reader has matched 0 of 1 publishers)" in sim.waiting[0]
            assert "bag_recorder recording" in sim.waiting[0]
            assert sim.episode_index == -1
            recorder.matching = True
            assert wait_for(lambda: sim.episode_index >= 0, timeout=20), sim.waiting
    finally:
        recorder.close()
        for node in (sim, recorder, controller):
            node.destroy_node()


def test_recorder_reports_the_publishers_its_readers_matched(ros_context, tmp_path):
    """The real report: 0 for the command topics, then 1 once a controller in another
    participant (another context, as another process would be) has been matched."""
    recorder = BagRecorder(context=ros_context, parameter_overrides=[
        Parameter("bag_path", value=str(tmp_path / "bag"))])
    listener = Node("listener", context=ros_context)
    reports = []
    listener.create_subscription(String, "bag_recorder/" + conv.RECORDER_MATCHES_TOPIC,
                                 lambda msg: reports.append(json.loads(msg.data)), TRANSIENT_LOCAL)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(recorder)
    executor.add_node(listener)
    other = rclpy.Context()
    rclpy.init(context=other, domain_id=ros_context.get_domain_id())
    controller = None
    try:
        with spinning(executor):
            assert wait_for(lambda: reports, timeout=10)
            assert reports[-1][ARM] == 0 and reports[-1][GRIPPER] == 0 and "/clock" in reports[-1]
            controller = _controller(other)
            assert wait_for(lambda: reports[-1][ARM] == 1 and reports[-1][GRIPPER] == 1, timeout=20), reports
    finally:
        recorder.close()
        for node in (recorder, listener) + ((controller,) if controller else ()):
            node.destroy_node()
        rclpy.shutdown(context=other)
