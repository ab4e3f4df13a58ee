"""bag_recorder over real DDS on a private context: sim-time stamps, offered QoS, type
hashes, episode seeds, discovery of unknown types; as a process: SIGTERM gives a complete
bag, SIGKILL a bag that repair() makes readable up to the last flush."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from builtin_interfaces.msg import Time
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosbags.highlevel import AnyReader
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Float64MultiArray, Header, String

from arm_act.bags import BagError, bag_info, read_bag, repair
from arm_act.nodes.bag_recorder import BagRecorder
from tests.conftest import spin_until

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[1]
LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)


def _stamp(ns: int) -> Time:
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def _episode(state: str) -> String:
    return String(data=json.dumps({"episode": 0, "seed": 42, "n_blocks": 3, "state": state,
                                   "instruction": "put the red block in the box", "time": 1.5}))


def test_recorder_stamps_sim_time_and_records_offered_qos(ros_context, tmp_path):
    bag = tmp_path / "bag"
    recorder = BagRecorder(context=ros_context, parameter_overrides=[
        Parameter("use_sim_time", value=True), Parameter("bag_path", value=str(bag)),
        Parameter("topics", value=["/clock", "joint_states", "camera/front/image_raw", "episode",
                                   "arm_controller/commands", "extra"]),
        Parameter("flush_interval", value=0.2), Parameter("discovery_interval", value=0.1)])
    source = Node("source", context=ros_context)
    clock_pub = source.create_publisher(Clock, "/clock", 10)
    joints_pub = source.create_publisher(JointState, "joint_states", 10)
    image_pub = source.create_publisher(Image, "camera/front/image_raw", 10)
    episode_pub = source.create_publisher(String, "episode", LATCHED)
    command_pub = source.create_publisher(Float64MultiArray, "arm_controller/commands", 10)
    extra_pub = source.create_publisher(Bool, "extra", 10)  # a type the recorder must discover
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(recorder)
    executor.add_node(source)
    try:
        episode_pub.publish(_episode("running"))  # before the recorder matched: latched
        assert spin_until(executor, lambda: all(p.get_subscription_count() > 0 for p in (
            joints_pub, image_pub, episode_pub, command_pub, extra_pub)) and clock_pub.get_subscription_count() >= 2,
            timeout=20)
        stamps = []
        for k in range(1, 6):
            t = 10_000_000_000 + k * 20_000_000
            stamps.append(t)
            clock_pub.publish(Clock(clock=_stamp(t)))
            assert spin_until(executor, lambda t=t: recorder.get_clock().now().nanoseconds == t, timeout=10)
            count = recorder.writer.message_count
            joints_pub.publish(JointState(header=Header(stamp=_stamp(t)), name=["a"], position=[float(k)]))
            command_pub.publish(Float64MultiArray(data=[float(k)] * 7))
            extra_pub.publish(Bool(data=True))
            if k == 3:
                image_pub.publish(Image(header=Header(stamp=_stamp(t)), height=1, width=1, encoding="rgb8",
                                        step=3, data=[1, 2, 3]))
            expected = count + 3 + (k == 3)
            assert spin_until(executor, lambda expected=expected: recorder.writer.message_count >= expected,
                              timeout=10)
        episode_pub.publish(_episode("success"))
        assert spin_until(executor, lambda: recorder.episodes.get(0, {}).get("state") == "success", timeout=10)
        hashes = {t: source.get_publishers_info_by_topic(t)[0].topic_type_hash
                  for t in ("/joint_states", "/episode", "/extra")}
    finally:
        recorder.close()
        recorder.destroy_node()
        source.destroy_node()
        executor.shutdown()

    info = bag_info(bag)
    assert info.complete
    messages = list(read_bag(bag))

    def by_topic(name):
        return [(m.timestamp_ns, m.msg) for m in messages if m.topic == name]

    assert [t for t, _ in by_topic("/joint_states")] == stamps  # sim time of receipt
    assert [t for t, _ in by_topic("/arm_controller/commands")] == stamps
    assert [m.data[0] for _, m in by_topic("/arm_controller/commands")] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert len(by_topic("/extra")) >= 4 and info.topics["/extra"].msgtype == "std_msgs/msg/Bool"
    assert [t for t, _ in by_topic("/camera/front/image_raw")] == [stamps[2]]
    assert [json.loads(m.data)["state"] for _, m in by_topic("/episode")] == ["running", "success"]

    meta = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    topics = {t["topic_metadata"]["name"]: t["topic_metadata"] for t in meta["topics_with_message_count"]}
    for topic, live_hash in hashes.items():
        assert topics[topic]["type_description_hash"] == str(live_hash)
    # What the publishers offered, not what the recorder asked for (best effort for sensors).
    assert topics["/joint_states"]["offered_qos_profiles"][0]["reliability"] == "reliable"
    assert topics["/episode"]["offered_qos_profiles"][0]["durability"] == "transient_local"
    assert json.loads(meta["custom_data"]["episode_seeds"]) == [42]
    (episode,) = json.loads(meta["custom_data"]["episodes"])
    assert episode["state"] == "success" and episode["n_blocks"] == 3
    assert meta["custom_data"]["arm_act_version"]


def test_recorder_refuses_an_existing_bag_path(ros_context, tmp_path):
    with pytest.raises(BagError, match="exists already"):
        BagRecorder(context=ros_context, parameter_overrides=[Parameter("bag_path", value=str(tmp_path))])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_recorder_process_survives_signals(ros_context, tmp_path, sig):
    bag = tmp_path / "bag"
    env = dict(os.environ, ROS_DOMAIN_ID=str(ros_context.get_domain_id()), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
               PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "arm_act.nodes.bag_recorder", "--ros-args", "-p", f"bag_path:={bag}",
         "-p", "topics:=[/clock, arm_controller/commands]", "-p", "flush_interval:=0.1"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    source = Node("source", context=ros_context)
    clock_pub = source.create_publisher(Clock, "/clock", 10)
    command_pub = source.create_publisher(Float64MultiArray, "arm_controller/commands", 100)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(source)
    try:
        assert spin_until(executor, lambda: command_pub.get_subscription_count() > 0
                          and clock_pub.get_subscription_count() >= 2, timeout=30)

        def flushed(topic: str) -> int:
            try:
                return sum(m.topic == topic for m in read_bag(bag, allow_incomplete=True))
            except BagError:  # the recorder has not created the bag yet
                return 0

        # Once a /clock message is in the bag, the recorder's node clock runs on sim time. (The
        # publisher may see the match before the recorder's reader does: publish until then.)
        def clock_recorded() -> bool:
            clock_pub.publish(Clock(clock=_stamp(5_000_000_000)))
            return flushed("/clock") > 0

        assert spin_until(executor, clock_recorded, timeout=20, step=0.1)
        for i in range(20):
            clock_pub.publish(Clock(clock=_stamp(5_000_000_000 + i * 20_000_000)))
            command_pub.publish(Float64MultiArray(data=[float(i)] * 7))
        assert spin_until(executor, lambda: flushed("/arm_controller/commands") == 20, timeout=20, step=0.1)
    finally:
        proc.send_signal(sig)
        output = proc.communicate(timeout=30)[0].decode()
        source.destroy_node()
        executor.shutdown()

    if sig == signal.SIGTERM:
        assert proc.returncode == 0, output
        assert bag_info(bag).complete
    else:
        with pytest.raises(BagError, match="incomplete bag"):
            read_bag(bag)
        assert not repair(bag).complete
    with AnyReader([bag]) as reader:
        commands = [t for c, t, _ in reader.messages() if c.topic == "/arm_controller/commands"]
    assert len(commands) == 20
    assert all(5_000_000_000 <= t < 6_000_000_000 for t in commands)  # sim time, not wall time


def test_live_bag_agrees_with_the_same_episode_recorded_in_process(ros_context, tmp_path):
    """sim_node + expert_node + bag_recorder in lockstep over DDS, and the same episode in
    process (what `arm-act collect` writes): the recorder's stamps are the sim time each
    message was sent at (never before its own stamp, never more than one clock step after),
    the first episode waits for the recorder (the bag starts at its first tick), and
    `arm-act report`'s command-rate statistics are the same for both bags."""
    import numpy as np

    from arm_act.bags.episode import EpisodeBagRecorder
    from arm_act.common.episodes import EpisodeSchedule, parse_blocks
    from arm_act.eval.report import analyse_bag
    from arm_act.nodes.expert_node import ExpertNode
    from arm_act.nodes.sim_node import SimNode
    from arm_act.ros.conversions import CLOCK_START
    from arm_act.sim import ArmEnv, SimConfig, perturbation_rng
    from arm_act.sim.rollout import ExpertAgent, run_episode
    from tests.conftest import spinning, wait_for

    seed, limit = 3, 2.0
    live = tmp_path / "live"
    sim_time = Parameter("use_sim_time", value=True)
    sim = SimNode(context=ros_context, parameter_overrides=[
        sim_time, Parameter("mode", value="lockstep"), Parameter("episodes", value=1), Parameter("seed", value=seed),
        Parameter("episode_time_limit", value=limit), Parameter("wait_for_recorder", value=True)])
    expert = ExpertNode(context=ros_context, parameter_overrides=[sim_time, Parameter("mode", value="lockstep")])
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(sim)
    executor.add_node(expert)
    recorder = None
    try:
        with spinning(executor):
            assert wait_for(lambda: sim.state == "waiting" and "bag_recorder" in " ".join(sim.waiting), timeout=20)
            assert sim.episode_index == -1  # no recorder yet: no episode
            recorder = BagRecorder(context=ros_context, parameter_overrides=[
                sim_time, Parameter("bag_path", value=str(live)), Parameter("flush_interval", value=0.2)])
            executor.add_node(recorder)
            assert wait_for(lambda: sim.finished, timeout=120)
            assert wait_for(lambda: recorder._unstamped == [] or sim.done.is_set(), timeout=10)
        recorder.close()
    finally:
        for node in (sim, expert) + ((recorder,) if recorder else ()):
            node.destroy_node()
    (info,) = sim.finished
    spec = EpisodeSchedule(seed=seed, blocks=parse_blocks("2-5"), episodes=1).next()
    env = ArmEnv(SimConfig(episode_time_limit=limit))
    try:
        in_process = EpisodeBagRecorder.for_rollout(tmp_path / "in_process", env, spec)
        result = run_episode(env, ExpertAgent(rng=perturbation_rng(spec.seed)), spec.seed, spec.n_blocks,
                             on_tick=in_process.record_tick)
        in_process.finish(result)
    finally:
        env.close()
    assert result.status == info.state and result.ticks == round(info.time * 50)

    step = 20_000_000  # lockstep: the sim's clock advances one control period at a time
    first = None
    with AnyReader([live]) as reader:
        for connection, t, raw in reader.messages():
            msg = reader.deserialize(raw, connection.msgtype)
            stamp = getattr(msg, "clock", None) or getattr(getattr(msg, "header", None), "stamp", None)
            if stamp is None or connection.topic in ("/policy/diagnostics", "/expert/diagnostics",
                                                     "/sim/diagnostics"):
                continue
            own = stamp.sec * 1_000_000_000 + stamp.nanosec
            first = own if first is None else min(first, own)
            assert own <= t <= own + step, f"{connection.topic}: stamped {t}, its own stamp {own}"
    assert first == round(CLOCK_START * 1e9)  # the recorder saw the first tick of the first episode
    ours, theirs = (analyse_bag(path).metrics["arm_commands"] for path in (live, in_process.path))
    assert ours["count"] == theirs["count"] == result.ticks
    for key in ("mean_rate_hz", "period_p50_ms", "period_p99_ms", "period_max_ms", "late_periods"):
        assert ours[key] == pytest.approx(theirs[key], rel=1e-6), key
    np.testing.assert_allclose(ours["mean_rate_hz"], 50.0, rtol=1e-3)


def test_a_recorder_killed_and_started_again_writes_a_new_bag_and_the_old_one_stays_readable(ros_context, tmp_path):
    """bag_recorder with its default bag name (rosbag2_<date>-<time>, in its working
    directory), killed with SIGKILL mid-recording and started again (by hand or launch's
    respawn): the new process records into a new bag, and the first one reads back up to what
    it had flushed."""
    import time

    env = dict(os.environ, ROS_DOMAIN_ID=str(ros_context.get_domain_id()), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
               PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "arm_act.nodes.bag_recorder", "--ros-args",
               "-p", "topics:=[/clock, arm_controller/commands]", "-p", "flush_interval:=0.1"]
    source = Node("source", context=ros_context)
    clock_pub = source.create_publisher(Clock, "/clock", 10)
    command_pub = source.create_publisher(Float64MultiArray, "arm_controller/commands", 100)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(source)

    def bags():
        return sorted(p for p in tmp_path.iterdir() if p.name.startswith("rosbag2_"))

    def recorded(bag) -> int:
        try:
            return sum(m.topic == "/arm_controller/commands" for m in read_bag(bag, allow_incomplete=True))
        except BagError:
            return 0

    def record_into_new_bag(first_value: float) -> subprocess.Popen:
        before = set(bags())
        proc = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        assert spin_until(executor, lambda: command_pub.get_subscription_count() > 0 and set(bags()) - before,
                          timeout=30)
        (bag,) = set(bags()) - before

        def clock_recorded() -> bool:  # from here on the recorder's clock runs on sim time
            clock_pub.publish(Clock(clock=_stamp(5_000_000_000)))
            try:
                return any(m.topic == "/clock" for m in read_bag(bag, allow_incomplete=True))
            except BagError:
                return False

        assert spin_until(executor, clock_recorded, timeout=20, step=0.1)
        for i in range(10):
            command_pub.publish(Float64MultiArray(data=[first_value + i] * 7))
        assert spin_until(executor, lambda: recorded(bag) == 10, timeout=20, step=0.1)
        return proc

    procs = []
    try:
        procs.append(record_into_new_bag(0.0))
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=30)
        time.sleep(1.1)  # the default name has one-second resolution, as ros2 bag's
        procs.append(record_into_new_bag(100.0))
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(timeout=30) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        source.destroy_node()
        executor.shutdown()
    old, new = bags()
    assert not repair(old).complete and bag_info(new).complete
    for bag, first in ((old, 0.0), (new, 100.0)):
        with AnyReader([bag]) as reader:
            values = [reader.deserialize(raw, c.msgtype).data[0] for c, _, raw in reader.messages()
                      if c.topic == "/arm_controller/commands"]
        assert values == [first + i for i in range(10)]
