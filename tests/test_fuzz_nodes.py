"""Every subscriber survives every message its type allows (property-based, hypothesis).

In process: each subscription callback of each node is driven with arbitrary messages of its
type (tests/message_strategies.py: extreme and non-finite numbers, huge and empty arrays,
malformed JSON and text, wrong frame ids, stamps in the past and future), interleaved with
valid control ticks. Checked after every message: nothing escaped the callback, the only
rejections are ConversionError (a reason the node gives, not a crash it swallowed), every
command the node published is finite and inside the joint limits, and a rejected input is
counted under its name (the throttled warning names it). At the end the node still works.

Over DDS (one process, loopback only, bounded count and time): a policy_node process gets
fuzzed messages on every topic it subscribes to, the episode message that used to kill it
among them, then a valid feed: it must still be alive and commanding.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rclpy.parameter import Parameter
from rclpy.serialization import serialize_message
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float32MultiArray, Float64MultiArray, String
from visualization_msgs.msg import MarkerArray

from arm_act.nodes.guard import Rejections, rejections
from arm_act.policy.runtime import ARM_LOWER, ARM_UPPER, GRIPPER_RANGE
from arm_act.ros import conversions as conv
from tests import message_strategies as ms

pytestmark = pytest.mark.ros
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("ARM_ACT_FUZZ_EXAMPLES", "80"))  # per callback
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much, HealthCheck.large_base_example])
HOME = np.array([0.0, -0.25, 0.0, -2.35, 0.0, 2.1, 0.785, 0.04, 0.04])
CASES_RUN: dict[str, int] = {}


class Captured:
    """Stands in for a node's command publisher: keeps what would have been sent."""

    def __init__(self):
        self.sent = []

    def publish(self, msg):
        self.sent.append(list(msg.data))


def _params(**values):
    return [Parameter(k, value=v) for k, v in values.items()] + [Parameter("use_sim_time", value=True)]


def _episode(start=1.0, episode=0):
    return conv.episode_msg(conv.EpisodeInfo(episode=episode, seed=0, n_blocks=3, state="running",
                                             instruction="put the red block in the box", time=0.0, start=start))


class Driver:
    """Valid ticks between the fuzzed messages: clock, joint state, (camera pair), so a node
    in any state gets the chance to publish a command built from what the fuzz left it."""

    def __init__(self, node, cameras=()):
        self.node, self.cameras, self.t = node, cameras, 1.0
        self.arm, self.gripper = Captured(), Captured()
        node.arm_pub, node.gripper_pub = self.arm, self.gripper
        node.episode_callback(_episode())

    def tick(self, camera=False):
        self.t += 0.01
        node = self.node
        if camera:
            for name in self.cameras:
                node.image_callback(name, conv.image_msg(self.t, np.full((96, 96, 3), 90, np.uint8), name))
        node._joint_state_in(conv.joint_state_msg(self.t, HOME, np.zeros(9), np.zeros(9)))
        if node.mode == "realtime":
            node.clock_tick_callback(conv.clock_msg(self.t))

    def check(self):
        for arm in self.arm.sent:
            assert len(arm) == 7 and np.all(np.isfinite(arm)), arm
            assert np.all(np.asarray(arm) >= ARM_LOWER) and np.all(np.asarray(arm) <= ARM_UPPER), arm
        for (gripper,) in self.gripper.sent:
            assert np.isfinite(gripper) and GRIPPER_RANGE[0] <= gripper <= GRIPPER_RANGE[1], gripper
        kinds = set(rejections(self.node).kinds)
        assert kinds <= {"ConversionError"}, f"a callback raised {kinds - {'ConversionError'}}: an unchecked input"


def _fuzz(name, driver, callback, strategy):
    calls = [0]

    @FUZZ
    @given(msg=strategy, camera_tick=st.booleans())
    def run(msg, camera_tick):
        callback(msg)  # an exception escaping here fails the test
        calls[0] += 1
        driver.tick(camera=camera_tick)
        driver.check()

    run()
    CASES_RUN[name] = calls[0]
    assert calls[0] >= min(EXAMPLES, 50), f"{name}: only {calls[0]} cases ran"



POLICY_INPUTS = {
    "joint_states": (lambda n: n._joint_state_in, st.one_of(ms.messages(JointState), ms.joint_states_like())),
    "task": (lambda n: n.task_callback, ms.messages(String)),
    "episode": (lambda n: n.episode_callback, st.one_of(ms.messages(String), ms.episode_json_like())),
    "front image": (lambda n: lambda m: n.image_callback("front", m),
                    st.one_of(ms.messages(Image), ms.images_like("front"))),
    "wrist image": (lambda n: lambda m: n.image_callback("wrist", m),
                    st.one_of(ms.messages(Image), ms.images_like("wrist"))),
    "/clock": (lambda n: n.clock_tick_callback, st.one_of(ms.messages(Clock), ms.clocks())),
}


@pytest.mark.parametrize("mode", ["realtime", "lockstep"])
@pytest.mark.parametrize("topic", sorted(POLICY_INPUTS))
def test_policy_node_survives_any_message(ros_context, tiny_checkpoint, topic, mode):
    from arm_act.nodes.policy_node import PolicyNode

    if topic == "/clock" and mode == "lockstep":
        pytest.skip("lockstep ticks on joint states, not /clock")
    node = PolicyNode(context=ros_context, parameter_overrides=_params(mode=mode, checkpoint=str(tiny_checkpoint)))
    try:
        driver = Driver(node, cameras=("front", "wrist"))
        get_callback, strategy = POLICY_INPUTS[topic]
        _fuzz(f"policy_node {mode} {topic}", driver, get_callback(node), strategy)
        # Still working: a fresh episode and a valid feed give valid commands again.
        node.episode_callback(_episode(start=driver.t + 0.01, episode=99))
        before = len(driver.arm.sent)
        deadline = time.monotonic() + 20
        while len(driver.arm.sent) < before + 5 and time.monotonic() < deadline:
            driver.tick(camera=round(driver.t * 100) % 10 == 0)
            time.sleep(0.005)
        assert len(driver.arm.sent) >= before + 5, "the node stopped commanding after the fuzz"
        driver.check()
    finally:
        node.destroy_node()


EXPERT_INPUTS = {
    "objects": (lambda n: n.objects_callback, st.one_of(ms.messages(MarkerArray), ms.markers_like())),
    "joint_states": (lambda n: n._joint_state_in, ms.joint_states_like()),
    "episode": (lambda n: n.episode_callback, ms.episode_json_like()),
}


@pytest.mark.parametrize("topic", sorted(EXPERT_INPUTS))
def test_expert_node_survives_any_message(ros_context, topic):
    from arm_act.nodes.expert_node import ExpertNode

    node = ExpertNode(context=ros_context, parameter_overrides=_params(mode="realtime"))
    try:
        driver = Driver(node)
        get_callback, strategy = EXPERT_INPUTS[topic]
        _fuzz(f"expert_node {topic}", driver, get_callback(node), strategy)
    finally:
        node.destroy_node()


def _fuzz_sim_input(node, name, callback, strategy, size):
    calls = [0]

    @FUZZ
    @given(msg=strategy)
    def run(msg):
        callback(msg)
        calls[0] += 1
        with node.commands.lock:
            target = node.commands.arm if size == 7 else node.commands.gripper
        # Whatever it holds is a valid target: the right length, finite.
        assert target is None or np.all(np.isfinite(np.atleast_1d(target)))
        assert target is None or np.atleast_1d(target).shape == (size,)
        assert set(rejections(node).kinds) <= {"ConversionError"}

    run()
    CASES_RUN[name] = calls[0]


def test_sim_node_survives_any_command(ros_context):
    from arm_act.nodes.sim_node import SimNode

    node = SimNode(context=ros_context, parameter_overrides=_params(mode="realtime", real_time_factor=4.0,
                                                                    wait_for_controller=False))
    try:
        _fuzz_sim_input(node, "sim_node arm command", node.arm_command_callback,
                        st.one_of(ms.messages(Float64MultiArray), ms.commands_like(7)), 7)
        _fuzz_sim_input(node, "sim_node gripper command", node.gripper_command_callback,
                        st.one_of(ms.messages(Float64MultiArray), ms.commands_like(1)), 1)
        assert not node.failed and node._thread.is_alive()  # the physics loop went on meanwhile
    finally:
        node.destroy_node()


def test_bag_recorder_survives_any_episode_text_and_clock(ros_context, tmp_path):
    from arm_act.nodes.bag_recorder import BagRecorder

    recorder = BagRecorder(context=ros_context, parameter_overrides=[
        Parameter("use_sim_time", value=True), Parameter("bag_path", value=str(tmp_path / "bag")),
        Parameter("topics", value=["episode", "/clock"])])
    calls = [0]
    received = [time.time_ns()]

    @FUZZ
    @given(text=st.one_of(ms.messages(String), ms.episode_json_like()), clock=ms.messages(Clock))
    def run(text, clock):
        received[0] += 1000
        recorder.message_callback("/episode", "std_msgs/msg/String", serialize_message(text),
                                  {"received_timestamp": received[0]})
        recorder.clock_callback(clock, {"received_timestamp": received[0] + 1})
        calls[0] += 1
        assert set(rejections(recorder).kinds) <= {"ConversionError"}
        assert recorder.failed is None

    try:
        run()
        CASES_RUN["bag_recorder episode+/clock"] = calls[0]
        recorder.close()
        assert recorder.writer.message_count == calls[0]  # every message recorded, bad JSON or not
    finally:
        recorder.destroy_node()


def test_rejection_warnings_name_the_input_and_are_throttled():
    class Log:
        def __init__(self):
            self.lines = []

        def warning(self, text):
            self.lines.append(text)

    log = Log()
    rejected = Rejections(log, every_s=0.2)
    for _ in range(50):
        rejected.reject("front image", "unsupported image encoding '32FC1'")
        rejected.reject("episode", "episode start nan is not a sim time")
    assert len(log.lines) == 2  # one per input, not one per message
    assert "rejected front image" in log.lines[0] and "32FC1" in log.lines[0]
    time.sleep(0.25)
    rejected.reject("front image", "unsupported image encoding '32FC1'")
    assert "49 more since the last warning" in log.lines[-1]
    assert rejected.counts == {"front image": 51, "episode": 50}


# ---------------------------------------------------------------- over DDS, as a process
def _publishers(node):
    from arm_act.ros.qos import TRANSIENT_LOCAL

    return {
        "joint_states": (node.create_publisher(JointState, "joint_states", 10),
                         st.one_of(ms.messages(JointState), ms.joint_states_like())),
        "episode": (node.create_publisher(String, "episode", TRANSIENT_LOCAL),
                    st.one_of(ms.messages(String), ms.episode_json_like())),
        "task": (node.create_publisher(String, "task", TRANSIENT_LOCAL), ms.messages(String)),
        "camera/front/image_raw": (node.create_publisher(Image, "camera/front/image_raw", 10),
                                   st.one_of(ms.messages(Image), ms.images_like("front"))),
        "camera/wrist/image_raw": (node.create_publisher(Image, "camera/wrist/image_raw", 10),
                                   ms.images_like("wrist")),
        "/clock": (node.create_publisher(Clock, "/clock", 10), st.one_of(ms.messages(Clock), ms.clocks())),
    }


DDS_EXAMPLES = 60  # per topic


def _send_fuzz(topic, pub, strategy, sent):
    @settings(max_examples=DDS_EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(msg=strategy)
    def send(msg):
        pub.publish(msg)
        sent[topic] = sent.get(topic, 0) + 1
        if sent[topic] % 10 == 0:
            time.sleep(0.02)  # a bounded rate: 60 messages per topic in about a second

    send()


def test_policy_node_process_survives_a_dds_fuzz(ros_context, tiny_checkpoint):
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    from tests.test_policy_node import FeedNode, _run_feed

    domain = ros_context.get_domain_id()
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
               PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "arm_act.nodes.policy_node", "--ros-args",
                             "-p", f"checkpoint:={tiny_checkpoint}"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    fuzzer = Node("fuzzer", context=ros_context)
    pubs = _publishers(fuzzer)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(fuzzer)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(p.get_subscription_count() for p, _ in pubs.values()):
            executor.spin_once(timeout_sec=0.1)
            assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        assert all(p.get_subscription_count() for p, _ in pubs.values()), "policy_node never subscribed"
        # The message that killed policy_node before (problem 5 of the issue), then the fuzz.
        killer = json.dumps({"episode": 7, "seed": 0, "n_blocks": 3, "state": "running", "instruction": "x",
                             "time": 0.0, "start": float("nan")})
        pubs["episode"][0].publish(String(data=killer))
        sent = {}
        started = time.monotonic()
        for topic, (pub, strategy) in pubs.items():
            _send_fuzz(topic, pub, strategy, sent)
            assert time.monotonic() - started < 120, "the fuzz is bounded in time"
        deadline = time.monotonic() + 2.0  # the last messages are still being taken
        while time.monotonic() < deadline and proc.poll() is None:
            executor.spin_once(timeout_sec=0.1)
        assert proc.poll() is None, f"policy_node died on a fuzzed message: {proc.stdout.read().decode()[-3000:]}"
        fuzzer.destroy_node()
        # Still a working controller: a valid feed gets finite commands back.
        feed = FeedNode(ros_context)
        executor.add_node(feed)
        from tests.conftest import spinning

        with spinning(executor):
            feed.task.publish(conv.task_msg("put the red block in the box"))
            deadline = time.monotonic() + 30
            while not feed.arm and time.monotonic() < deadline:
                feed.episode.publish(_episode(start=feed.t, episode=42))
                _run_feed(executor, feed, 1.0)
        if not feed.arm:
            proc.send_signal(signal.SIGINT)
            pytest.fail("no command after the fuzz: " + proc.communicate(timeout=30)[0].decode()[-4000:])
        assert all(np.all(np.isfinite(a)) for a in feed.arm)
        CASES_RUN["policy_node process over DDS"] = sum(sent.values())
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            output = proc.communicate(timeout=30)[0].decode()
        except subprocess.TimeoutExpired:
            proc.kill()
            output = proc.communicate()[0].decode()
        executor.shutdown()
    assert proc.returncode == 0, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "rejected" in output  # the throttled warnings name what was rejected


def teardown_module(module):
    if CASES_RUN:
        print("\nfuzz cases run:", json.dumps(CASES_RUN, indent=1))


VIEWER_INPUTS = {
    "front image": (lambda n: lambda m: n.image_callback("front", m), ms.images_like("front")),
    "joint_states": (lambda n: n.joint_state_callback, st.one_of(ms.messages(JointState), ms.joint_states_like())),
    "episode": (lambda n: n.episode_callback, st.one_of(ms.messages(String), ms.episode_json_like())),
    "arm command": (lambda n: n.arm_callback, ms.commands_like(7)),
    "gripper command": (lambda n: n.gripper_callback, ms.commands_like(1)),
    "policy/attention": (lambda n: n.attention_callback, ms.messages(Float32MultiArray)),
}


@pytest.mark.parametrize("topic", sorted(VIEWER_INPUTS))
def test_demo_viewer_survives_any_message(ros_context, topic):
    """The demo's viewer composes a frame from whatever arrives: it must not stop the demo."""
    from arm_act.nodes.viewer_node import DemoViewer

    viewer = DemoViewer(episodes=0, context=ros_context)
    try:
        get_callback, strategy = VIEWER_INPUTS[topic]
        callback = get_callback(viewer)
        calls = [0]
        rgb = np.full((96, 96, 3), 90, np.uint8)

        @FUZZ
        @given(msg=strategy)
        def run(msg):
            callback(msg)
            calls[0] += 1
            for name in ("front", "wrist"):  # a valid pair composes a frame from what the fuzz left
                viewer.image_callback(name, conv.image_msg(1.0 + calls[0] * 0.1, rgb, name))
            assert set(rejections(viewer).kinds) <= {"ConversionError"}, rejections(viewer).kinds

        run()
        CASES_RUN[f"demo_viewer {topic}"] = calls[0]
    finally:
        viewer.destroy_node()
