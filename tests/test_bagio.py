"""Bag round trips (write with BagWriter; read with rosbags' AnyReader, the mcap library and
read_bag; fields equal) for every message type we record, the rosbag2 metadata format, and
what happens when a writer is killed, the disk fills up or the path is not a bag."""
from __future__ import annotations

import array
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from builtin_interfaces.msg import Duration, Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from mcap.exceptions import McapError
from mcap.reader import NonSeekingReader, make_reader
from rclpy.serialization import deserialize_message, serialize_message
from rosbags.highlevel import AnyReader
from rosbags.serde import SerdeError
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray, Header, String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
from visualization_msgs.msg import Marker, MarkerArray

from arm_act import bags as bagio
from arm_act.bags import BagError, BagWriter, TopicSpec, bag_info, read_bag, repair

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1", "panda_finger_joint2"]


def _header(sec: int, frame: str = "") -> Header:
    return Header(stamp=Time(sec=sec, nanosec=250_000_000), frame_id=frame)


def sample_messages() -> list[tuple[str, str, object]]:
    """(topic, type, rclpy message) for every type the recorder and collect write."""
    rng = np.random.default_rng(0)
    image = Image(header=_header(1, "front_camera_optical_frame"), height=96, width=96, encoding="rgb8",
                  is_bigendian=0, step=96 * 3)
    image.data = rng.integers(0, 256, 96 * 96 * 3, dtype=np.uint8).tobytes()
    info = CameraInfo(header=_header(1, "front_camera_optical_frame"), height=96, width=96,
                      distortion_model="plumb_bob", d=[0.0] * 5,
                      k=[100.0, 0, 48, 0, 100.0, 48, 0, 0, 1], r=np.eye(3).ravel().tolist(),
                      p=[100.0, 0, 48, 0, 0, 100.0, 48, 0, 0, 0, 1, 0])
    markers = MarkerArray()
    for i, (name, colour) in enumerate([("block_red", "red"), ("block_blue", "blue"), ("box", "")]):
        marker = Marker(header=_header(1, "world"), ns="block" if colour else "box", id=i, type=Marker.CUBE,
                        text=f"{name}|{colour}")
        marker.pose.position.x, marker.pose.position.y, marker.pose.position.z = 0.4 + i / 10, -0.1, 0.02
        marker.pose.orientation.w = 1.0
        marker.scale.x = marker.scale.y = marker.scale.z = 0.04
        marker.color.r, marker.color.a = 1.0, 1.0
        markers.markers.append(marker)
    chunk = JointTrajectory(header=_header(1), joint_names=JOINTS)
    for k in range(5):  # positions only: rclpy pads this type's serialization the most
        chunk.points.append(JointTrajectoryPoint(positions=rng.normal(size=9).tolist(),
                                                 time_from_start=Duration(sec=0, nanosec=20_000_000 * (k + 1))))
    diagnostics = DiagnosticArray(header=_header(1), status=[DiagnosticStatus(
        level=DiagnosticStatus.WARN, name="policy_node: inference", message="slow", hardware_id="cpu",
        values=[KeyValue(key="latency_ms", value="23.5"), KeyValue(key="missed_deadlines", value="2")])])
    return [
        ("/clock", "rosgraph_msgs/msg/Clock", Clock(clock=Time(sec=3, nanosec=500))),
        ("/joint_states", "sensor_msgs/msg/JointState",
         JointState(header=_header(1), name=JOINTS, position=rng.normal(size=9).tolist(),
                    velocity=rng.normal(size=9).tolist(), effort=rng.normal(size=9).tolist())),
        ("/joint_states", "sensor_msgs/msg/JointState", JointState(name=["a"], position=[1.0])),  # empty seqs
        ("/camera/front/image_raw", "sensor_msgs/msg/Image", image),
        ("/camera/front/camera_info", "sensor_msgs/msg/CameraInfo", info),
        ("/task", "std_msgs/msg/String", String(data="put the red block in the box")),
        ("/episode", "std_msgs/msg/String", String(data='{"episode": 0, "seed": 7, "state": "running"}')),
        ("/arm_controller/commands", "std_msgs/msg/Float64MultiArray",
         Float64MultiArray(data=rng.normal(size=7).tolist())),
        ("/gripper_controller/commands", "std_msgs/msg/Float64MultiArray", Float64MultiArray(data=[0.04])),
        ("/objects", "visualization_msgs/msg/MarkerArray", markers),
        ("/policy/action_chunk", "trajectory_msgs/msg/JointTrajectory", chunk),
        ("/policy/diagnostics", "diagnostic_msgs/msg/DiagnosticArray", diagnostics),
    ]


def plain(value):
    """An rclpy or a rosbags message (or field) as plain Python values, for comparison."""
    if hasattr(value, "get_fields_and_field_types"):  # rclpy; a `byte` field is bytes of length 1
        return {name: getattr(value, name)[0] if kind == "octet" else plain(getattr(value, name))
                for name, kind in value.get_fields_and_field_types().items()}
    if hasattr(value, "__msgtype__"):  # rosbags; its dataclasses also hold the constants
        _, fields = bagio.typestore().fielddefs[value.__msgtype__]
        return {name: plain(getattr(value, name)) for name, _ in fields}
    if isinstance(value, (np.ndarray, array.array, bytes, bytearray, list, tuple)):
        return [plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def write_samples(path: Path, compression=None) -> list[tuple[str, int, object]]:
    samples = sample_messages()
    specs = {topic: TopicSpec(topic, msgtype) for topic, msgtype, _ in samples}
    written = []
    with BagWriter(path, list(specs.values()), {"seed": 7, "episode_seeds": [7, 8]}, compression) as writer:
        for i, (topic, _, msg) in enumerate(samples):
            stamp = 1_000_000_000 + i * 10_000_000
            writer.write(topic, stamp, msg)
            written.append((topic, stamp, msg))
    return written


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_round_trip_every_recorded_type(tmp_path, compression):
    bag = tmp_path / "bag"
    written = write_samples(bag, compression)

    with AnyReader([bag]) as reader:  # rosbags, independently of our reader
        got = [(c.topic, t, reader.deserialize(raw, c.msgtype)) for c, t, raw in reader.messages()]
    assert [(t, s) for t, s, _ in got] == [(t, s) for t, s, _ in written]
    for (_, _, original), (_, _, decoded) in zip(written, got, strict=True):
        assert plain(decoded) == plain(original)

    with (bag / "bag.mcap").open("rb") as stream:  # the mcap library, with its summary
        mcap_messages = list(make_reader(stream).iter_messages())
    assert len(mcap_messages) == len(written)
    for (_, _, original), (schema, channel, message) in zip(written, mcap_messages, strict=True):
        assert schema.encoding == "ros2msg" and channel.message_encoding == "cdr"
        assert schema.name == bagio.ros_type_name(original)
        assert deserialize_message(message.data, type(original)) == original  # rclpy reads it too

    assert [plain(m.msg) for m in read_bag(bag)] == [plain(m) for _, _, m in written]


def test_rclpy_padding_is_removed_and_storage_is_canonical():
    for topic, msgtype, msg in sample_messages():
        raw = serialize_message(msg)
        stored = bagio.encode_cdr(msg, msgtype)
        assert stored == bagio.encode_cdr(raw, msgtype) == bagio.encode_cdr(bagio.decode_cdr(raw, msgtype), msgtype)
        bagio.typestore().deserialize_cdr(stored, msgtype)  # strict: no tail beyond CDR's 3 bytes
        assert len(stored) <= len(raw), topic
    # The reason for the canonical form: rclpy's buffer for this message is 8 bytes too long.
    raw = serialize_message(JointState(name=["a"], position=[1.0]))
    with pytest.raises(SerdeError, match="size mismatch"):
        bagio.typestore().deserialize_cdr(raw, "sensor_msgs/msg/JointState")


def test_same_content_gives_identical_files(tmp_path):
    write_samples(tmp_path / "1" / "bag")
    write_samples(tmp_path / "2" / "bag")
    first, second = (tmp_path / n / "bag" / "bag.mcap" for n in "12")
    assert first.read_bytes() == second.read_bytes()


def test_metadata_yaml_is_rosbag2_format(tmp_path):
    from rclpy.qos import qos_profile_sensor_data

    bag = tmp_path / "bag"
    specs = [TopicSpec("camera/front/image_raw", "sensor_msgs/msg/Image", qos_profile_sensor_data),
             TopicSpec("task", "std_msgs/msg/String", bagio.LATCHED_QOS)]
    with BagWriter(bag, specs, {"seed": 11, "instruction": "put the red block in the box"}) as writer:
        writer.write("task", 5, String(data="x"))
        writer.write("task", 7, String(data="y"))
        writer.set_metadata("success", False)
    assert not (bag / bagio.MARKER_NAME).exists()
    meta = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["version"] == 9
    assert meta["storage_identifier"] == "mcap"
    assert meta["relative_file_paths"] == ["bag.mcap"]
    assert meta["message_count"] == 2
    assert meta["duration"]["nanoseconds"] == 2 and meta["starting_time"]["nanoseconds_since_epoch"] == 5
    topics = {t["topic_metadata"]["name"]: t for t in meta["topics_with_message_count"]}
    assert set(topics) == {"/camera/front/image_raw", "/task"}
    assert topics["/task"]["message_count"] == 2 and topics["/camera/front/image_raw"]["message_count"] == 0
    image = topics["/camera/front/image_raw"]["topic_metadata"]
    assert image["type"] == "sensor_msgs/msg/Image" and image["serialization_format"] == "cdr"
    assert image["type_description_hash"].startswith("RIHS01_")
    (qos,) = image["offered_qos_profiles"]
    assert qos["reliability"] == "best_effort" and qos["history"] == "keep_last" and qos["depth"] == 5
    (qos,) = topics["/task"]["topic_metadata"]["offered_qos_profiles"]
    assert qos["durability"] == "transient_local" and qos["reliability"] == "reliable"
    assert meta["custom_data"] == {"seed": "11", "instruction": "put the red block in the box",
                                   "success": "false", "arm_act_version": bagio.software_version()}
    info = bag_info(bag)
    assert info.complete and info.problem is None
    assert info.message_count == 2 and info.start_ns == 5 and info.end_ns == 7
    assert info.topics["/task"].offered_qos_profiles[0]["durability"] == "transient_local"


# ---------------------------------------------------------------- killed writers
KILLED_WRITER = r"""
import sys, time
from std_msgs.msg import Float64MultiArray
from arm_act.bags import BagWriter, TopicSpec
path, flushed, pending = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
topic = "/arm_controller/commands"
writer = BagWriter(path, [TopicSpec(topic, "std_msgs/msg/Float64MultiArray")], {"seed": 3},
                   flush_interval_s=3600.0)
for i in range(flushed + pending):
    writer.write(topic, (i + 1) * 20_000_000, Float64MultiArray(data=[float(i)] * 7))
    if i + 1 == flushed:
        writer.flush()
print("written", flush=True)
time.sleep(120)
"""


def _killed_bag(tmp_path: Path, flushed: int, pending: int) -> Path:
    bag = tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(bag), str(flushed), str(pending)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready and proc.stdout.readline().strip() == b"written", proc.stderr.read().decode()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    return bag


def test_sigkilled_writer_leaves_flushed_messages_readable(tmp_path):
    bag = _killed_bag(tmp_path, flushed=30, pending=7)
    assert not (bag / "metadata.yaml").exists() and (bag / bagio.MARKER_NAME).exists()

    # The mcap library reads the summary-less file message by message up to its end.
    seen = []
    with (bag / "killed.mcap").open("rb") as stream:
        with pytest.raises(McapError):  # EndOfFile where the footer should be
            for _, _, message in NonSeekingReader(stream).iter_messages(log_time_order=False):
                seen.append(message.log_time)
    assert seen == [(i + 1) * 20_000_000 for i in range(30)]

    with pytest.raises(BagError, match="incomplete bag: the writer did not close it"):
        read_bag(bag)
    recovered = list(read_bag(bag, allow_incomplete=True))
    assert [m.msg.data[0] for m in recovered] == [float(i) for i in range(30)]
    info = bag_info(bag)
    assert not info.complete and info.message_count == 30 and info.custom_data["seed"] == "3"

    repaired = repair(bag)
    assert not repaired.complete and "repaired" in repaired.problem
    assert repaired.custom_data[bagio.INCOMPLETE_KEY] == "true" and repaired.custom_data["seed"] == "3"
    with AnyReader([bag]) as reader:
        assert reader.message_count == 30
        stamps = [t for _, t, _ in reader.messages()]
    assert stamps == [(i + 1) * 20_000_000 for i in range(30)]
    assert not (bag / bagio.MARKER_NAME).exists()
    with pytest.raises(BagError, match="repaired after an incomplete recording"):
        read_bag(bag)
    assert len(list(read_bag(bag, allow_incomplete=True))) == 30


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])  # 0.95 cuts into the summary only
def test_truncated_mcap_is_reported_read_up_to_the_damage_and_repaired(tmp_path, keep):
    bag = tmp_path / "bag"
    topic = "/arm_controller/commands"
    with BagWriter(bag, [TopicSpec(topic, "std_msgs/msg/Float64MultiArray")], flush_interval_s=1e-9) as writer:
        for i in range(200):  # flush_interval ~0: one chunk per message
            writer.write(topic, i * 1000, Float64MultiArray(data=[float(i)]))
    mcap = bag / "bag.mcap"
    data = mcap.read_bytes()
    mcap.write_bytes(data[: int(len(data) * keep)])

    with pytest.raises(BagError, match="truncated .mcap file bag.mcap"):
        read_bag(bag)
    prefix = [m.msg.data[0] for m in read_bag(bag, allow_incomplete=True)]
    assert prefix == [float(i) for i in range(len(prefix))]
    assert 0 < len(prefix) < 200 if keep < 0.9 else len(prefix) == 200
    assert repair(bag).message_count == len(prefix)
    with AnyReader([bag]) as reader:
        assert reader.message_count == len(prefix)


def test_disk_full_raises_bag_error_and_marks_the_bag(tmp_path):
    bag = tmp_path / "bag"
    topic = "/joint_states"
    writer = BagWriter(bag, [TopicSpec(topic, "sensor_msgs/msg/JointState")], flush_interval_s=3600.0)
    for i in range(5):
        writer.write(topic, i, JointState(name=["a"], position=[float(i)]))
    writer.flush()
    # From here on the kernel answers every write to the .mcap with ENOSPC, as on a full disk.
    mcap = str(bag / "bag.mcap")
    (fd,) = [int(fd) for fd in os.listdir("/proc/self/fd")
             if os.path.realpath(f"/proc/self/fd/{fd}") == mcap]
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, fd)
        writer.write(topic, 5, JointState(name=["a"], position=[5.0]))
        with pytest.raises(BagError, match=r"disk full \(ENOSPC\).*marked incomplete"):
            writer.flush()
    finally:
        os.close(full)
    with pytest.raises(BagError, match=r"not open for writing \(writer failed\)"):
        writer.write(topic, 6, JointState())
    writer.close()  # a no-op after the failure: the bag must not turn into a complete one
    assert not (bag / "metadata.yaml").exists()
    info = bag_info(bag)
    assert not info.complete and "disk full" in info.problem and info.message_count == 5
    assert repair(bag).message_count == 5


def test_exception_inside_with_block_leaves_bag_incomplete(tmp_path):
    bag = tmp_path / "bag"
    with pytest.raises(RuntimeError):
        with BagWriter(bag, [TopicSpec("/task", "std_msgs/msg/String")]) as writer:
            writer.write("/task", 1, String(data="a"))
            raise RuntimeError("episode crashed")
    info = bag_info(bag)
    assert not info.complete and "RuntimeError: episode crashed" in info.problem
    assert info.message_count == 1


def test_is_complete_is_false_for_unfinished_and_unreadable_bags(tmp_path):
    done = tmp_path / "done"
    with BagWriter(done, [TopicSpec("/task", "std_msgs/msg/String")]) as writer:
        writer.write("/task", 1, String(data="a"))
    crashed = tmp_path / "crashed"
    with pytest.raises(RuntimeError):
        with BagWriter(crashed, [TopicSpec("/task", "std_msgs/msg/String")]) as writer:
            writer.write("/task", 1, String(data="a"))
            raise RuntimeError("episode crashed")
    (tmp_path / "not_a_bag").mkdir()
    (tmp_path / "file.txt").write_text("x")
    assert bagio.is_complete(done)
    for path in (crashed, tmp_path / "not_a_bag", tmp_path / "file.txt", tmp_path / "missing"):
        assert not bagio.is_complete(path), path


# ---------------------------------------------------------------- errors
def test_errors_are_one_line_bag_errors(tmp_path):
    (tmp_path / "not_a_bag").mkdir()
    (tmp_path / "file.txt").write_text("x")
    cases = [
        (lambda: read_bag(tmp_path / "not_a_bag"), "not a rosbag2 bag"),
        (lambda: bag_info(tmp_path / "missing"), "path does not exist"),
        (lambda: read_bag(tmp_path / "file.txt"), "not a bag"),
        (lambda: BagWriter(tmp_path / "file.txt" / "bag"), "cannot create bag directory"),
        (lambda: BagWriter(tmp_path / "not_a_bag"), "exists already"),
        (lambda: TopicSpec("/x", "foo_msgs/msg/Bar"), "unknown message type 'foo_msgs/msg/Bar'"),
        (lambda: BagWriter(tmp_path / "c", compression="lz4"), "compression="),
    ]
    for call, match in cases:
        with pytest.raises(BagError, match=match) as info:
            call()
        assert "\n" not in str(info.value)
    assert not (tmp_path / "c").exists()
    with BagWriter(tmp_path / "bag", [TopicSpec("/task", "std_msgs/msg/String")]) as writer:
        with pytest.raises(BagError, match="is not in the bag"):
            writer.write("/other", 1, String())
        with pytest.raises(BagError, match="got a sensor_msgs/msg/JointState message for a std_msgs/msg/String"):
            writer.write("/task", 1, JointState())
        with pytest.raises(BagError, match="non-negative integer"):
            writer.write("/task", -1, String())
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "metadata.yaml").write_text("a: [")
    with pytest.raises(BagError, match="not rosbag2 metadata"):
        bag_info(tmp_path / "broken")
