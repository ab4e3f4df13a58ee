"""The Rerun viewer (arm_act.view, `arm-act view`): what a recording of a bag holds, read back
with Rerun's own RRD reader; the live bridge over DDS; errors on bags that cannot be shown.

The web viewer in a real browser is in tests/test_view_browser.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rerun.chunk import RrdReader
from synthetic_bags import JOINTS, _header, _types, image_msg, objects_msg

from arm_act.bags import BagWriter, bag_info, live_topic_specs, read_bag
from arm_act.cli import main as cli
from arm_act.sim.robot import ARM_JOINTS, HOME
from arm_act.view import layout as L
from arm_act.view import view_bags
from arm_act.view.kinematics import PandaKinematics
from arm_act.view.rrd import rrd_rows, rrd_static_entities
from tests.conftest import spinning, wait_for

CHUNK = 50
GRID = 6
START_NS = 1_000_000_000
PERIOD_NS = 20_000_000

# Bag topic -> the entity paths that get one row per message of it.
ROWS_PER_MESSAGE = {
    "/camera/front/image_raw": [L.camera_image("front")],
    "/camera/wrist/image_raw": [L.camera_image("wrist")],
    "/policy/attention": [L.camera_attention("front"), L.camera_attention("wrist")],
    "/policy/instruction_attention": [L.words_attention("front"), L.words_attention("wrist")],
    "/task": [L.INSTRUCTION],
    "/episode": [L.EPISODE_STATE, L.EPISODE_STATUS],
    "/joint_states": [L.joint_actual(j) for j in ARM_JOINTS] + [L.GRIPPER_ACTUAL, L.EE_ACTUAL]
                     + [L.robot_link(link) for link in ("panda_link0", "panda_link4", "panda_hand",
                                                        "panda_leftfinger", "panda_rightfinger")],
    "/arm_controller/commands": [L.joint_command(j) for j in ARM_JOINTS],
    "/gripper_controller/commands": [L.GRIPPER_COMMAND],
    "/objects": [L.BLOCKS],
    "/policy/action_chunk": [L.CHUNK_PATH],
    "/policy/diagnostics": [L.diagnostic(k) for k in L.DIAGNOSTIC_KEYS],
}


def _q(k: int) -> np.ndarray:
    q = HOME.copy()
    q[0] += 0.01 * k
    return q


def _policy_messages(ns: int, k: int):
    """attention (front, wrist), an action chunk and (every 25 ticks) diagnostics, as
    policy_node publishes them, built from rosbags types."""
    t = _types()
    dims = [t["std_msgs/msg/MultiArrayDimension"](label=label, size=size, stride=stride) for label, size, stride in
            (("front,wrist", 2, 2 * GRID * GRID), ("row", GRID, GRID * GRID), ("col", GRID, GRID))]
    weights = np.zeros((2, GRID, GRID), np.float32)
    weights[0, k % GRID, 2] = 1.0
    weights[1, 3, k % GRID] = 0.5
    attention = t["std_msgs/msg/Float32MultiArray"](
        layout=t["std_msgs/msg/MultiArrayLayout"](dim=dims, data_offset=0), data=weights.ravel())
    points = []
    for i in range(CHUNK):
        q = _q(k + i)
        points.append(t["trajectory_msgs/msg/JointTrajectoryPoint"](
            positions=np.r_[q[:7], q[7], q[7]], velocities=np.zeros(0), accelerations=np.zeros(0),
            effort=np.zeros(0), time_from_start=t["builtin_interfaces/msg/Duration"](
                sec=0, nanosec=(i + 1) * PERIOD_NS)))
    chunk = t["trajectory_msgs/msg/JointTrajectory"](header=_header(ns), joint_names=list(JOINTS), points=points)
    out = [("/policy/attention", attention), ("/policy/instruction_attention", attention),
           ("/policy/action_chunk", chunk)]
    if k % 25 == 0:
        kv = t["diagnostic_msgs/msg/KeyValue"]
        values = {"state": "ok", "inference_ms": "4.20", "observation_age_ms": "12.5", "deadline_misses": "0",
                  "ticks_without_fresh_chunk": str(k % 5), "target_xyz_m": "0.450 -0.050 0.020"}
        status = t["diagnostic_msgs/msg/DiagnosticStatus"](
            level=0, name="policy_node: inference", message="ok", hardware_id="arm_act",
            values=[kv(key=key, value=value) for key, value in values.items()])
        diagnostics = t["diagnostic_msgs/msg/DiagnosticArray"](header=_header(ns), status=[status])
        out.append(("/policy/diagnostics", diagnostics))
    return out


def write_policy_bag(path: Path, ticks: int = 60) -> Path:
    """A live-system bag (sim + policy topics, as bag_recorder records `arm-act demo`)."""
    t = _types()

    def string(text):
        return t["std_msgs/msg/String"](data=text)

    def floats(values):
        return t["std_msgs/msg/Float64MultiArray"](layout=t["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0),
                                                    data=np.asarray(values, dtype=np.float64))

    def episode(state, seconds):
        return string(json.dumps({"episode": 0, "seed": 11, "n_blocks": 2, "state": state, "time": seconds,
                                  "instruction": "put the red block in the box", "start": 1.0}))

    with BagWriter(path, live_topic_specs(), metadata={"seed": 11, "status": "timeout"}) as writer:
        writer.write("/task", START_NS, string("put the red block in the box"))
        writer.write("/episode", START_NS, episode("running", 0.0))
        for k in range(ticks):
            ns = START_NS + k * PERIOD_NS
            writer.write("/joint_states", ns, t["sensor_msgs/msg/JointState"](
                header=_header(ns), name=list(JOINTS), position=_q(k), velocity=np.zeros(9), effort=np.zeros(9)))
            writer.write("/objects", ns, objects_msg(k))
            if k % 5 == 0:
                for c, camera in enumerate(("front", "wrist")):
                    writer.write(f"/camera/{camera}/image_raw", ns, image_msg(ns, 40 * (c + 1), 96))
                for topic, msg in _policy_messages(ns, k):
                    writer.write(topic, ns + 5_000_000, msg)
            writer.write("/arm_controller/commands", ns, floats(_q(k + 1)[:7]))
            writer.write("/gripper_controller/commands", ns, floats([0.04]))
        writer.write("/episode", START_NS + ticks * PERIOD_NS, episode("timeout", ticks * PERIOD_NS * 1e-9))
    return path


def _scalars(path: Path, entity: str) -> list[float]:
    values = []
    for chunk in RrdReader(path).stream():
        if chunk.entity_path.lstrip("/") == entity and not chunk.is_static:
            batch = chunk.to_record_batch()
            values += [row[0] for row in batch.column("Scalars:scalars").to_pylist()]
    return values


@pytest.fixture(scope="module")
def policy_bag(tmp_path_factory):
    return write_policy_bag(tmp_path_factory.mktemp("policy") / "live_run")


@pytest.mark.unit
def test_rrd_of_a_live_bag_has_one_row_per_message_on_each_entity(policy_bag, tmp_path):
    rrd = tmp_path / "run.rrd"
    [result] = view_bags([policy_bag], save=rrd, report=lambda line: None)
    assert result.rrd == rrd and rrd.stat().st_size > 0 and result.skipped == 0
    counts = {name: topic.message_count for name, topic in bag_info(policy_bag).topics.items()}
    rows = rrd_rows(rrd)
    for topic, entities in ROWS_PER_MESSAGE.items():
        assert counts[topic] > 0, topic
        for entity in entities:
            assert rows.get(entity) == counts[topic], (topic, entity, rows.get(entity))
    diagnostics = counts["/policy/diagnostics"]
    assert rows[L.TARGET_GUESS] == diagnostics  # every diagnostics message carried target_xyz_m
    assert rows[L.BOX] if L.BOX in rows else True  # synthetic objects have no box; real ones do (below)
    # The path taken is drawn at each front frame once it has two points (the first frame has one).
    assert rows[L.EE_PATH] == counts["/camera/front/image_raw"] - 1
    static = rrd_static_entities(rrd)
    assert {L.TABLE, "world"} <= static
    assert {f"{L.robot_link(link)}/mesh" for link in ("panda_link0", "panda_link7", "panda_hand")} <= static
    # Values survive: joint 1 as logged equals the bag's joint states, in order.
    logged = _scalars(rrd, L.joint_actual("panda_joint1"))
    np.testing.assert_allclose(logged, [_q(k)[0] for k in range(60)])
    # and the recording carries its layout (a blueprint store beside the recording).
    assert len(RrdReader(rrd).blueprints()) == 1


def _active_camera_tab(rrd: Path) -> str:
    """The name of the tab the camera column's Tabs container shows first in rrd's layout."""
    reader = RrdReader(rrd)
    names, active = {}, []
    for chunk in reader.stream(store=reader.blueprints()[0]):
        batch = chunk.to_record_batch()
        if "ContainerBlueprint:display_name" in batch.schema.names:
            names[chunk.entity_path.lstrip("/")] = batch.column("ContainerBlueprint:display_name").to_pylist()[-1][0]
        if "ContainerBlueprint:active_tab" in batch.schema.names:
            active += [row[0] for row in batch.column("ContainerBlueprint:active_tab").to_pylist() if row]
    (tab,) = active
    return names[tab.lstrip("/")]


@pytest.mark.unit
def test_the_camera_tab_shown_first_is_a_choice(policy_bag, tmp_path):
    """`arm-act view --attention words` opens on where the instruction's words look."""
    for attention, name in (("queries", "action queries' attention"), ("words", "instruction's attention")):
        rrd = tmp_path / f"{attention}.rrd"
        view_bags([policy_bag], save=rrd, report=lambda line: None, attention=attention)
        assert _active_camera_tab(rrd) == name
    with pytest.raises(ValueError, match="'heads' is not one of queries, words"):
        L.blueprint(attention="heads")


@pytest.mark.unit
def test_chunk_path_is_forward_kinematics_of_the_chunk(policy_bag, tmp_path):
    rrd = tmp_path / "run.rrd"
    view_bags([policy_bag], save=rrd, report=lambda line: None)
    strips = []
    for chunk in RrdReader(rrd).stream():
        if chunk.entity_path.lstrip("/") == L.CHUNK_PATH and not chunk.is_static:
            strips += chunk.to_record_batch().column("LineStrips3D:strips").to_pylist()
    first = np.array(strips[0][0])  # the first chunk: (K, 3)
    assert first.shape == (CHUNK, 3)
    kinematics = PandaKinematics()
    try:
        expected = np.array([kinematics.grasp_point(np.r_[_q(i)[:7], _q(i)[7], _q(i)[7]]) for i in range(CHUNK)])
    finally:
        kinematics.close()
    np.testing.assert_allclose(first, expected, atol=1e-6)
    assert np.ptp(first[:, 1]) > 0.05  # joint 1 turns through the chunk: the path moves sideways


@pytest.mark.unit
def test_kinematics_matches_the_sim_link_poses():
    from arm_act.sim import ArmEnv

    kinematics = PandaKinematics()
    try:
        with ArmEnv() as env:
            env.reset(seed=5, n_blocks=2)
            q = env.joint_state().position
            np.testing.assert_allclose(kinematics.grasp_point(q), env.grasp_point(), atol=1e-6)
        poses = kinematics.link_poses(HOME)
        assert set(poses) == {v.link for v in kinematics.visuals}
        np.testing.assert_allclose(poses["panda_link0"][0], 0.0, atol=1e-9)  # the base sits at the origin
    finally:
        kinematics.close()


@pytest.fixture(scope="module")
def expert_bag(tmp_path_factory):
    out = tmp_path_factory.mktemp("collect") / "demos"
    assert cli.main(["collect", "--episodes", "1", "--blocks", "2", "--seed", "3", "--out", str(out)]) == 0
    return out / "episode_3"


@pytest.mark.slow
@pytest.mark.unit
def test_rrd_of_a_collected_bag_matches_it(expert_bag, tmp_path, capsys):
    rrd = tmp_path / "episode.rrd"
    assert cli.main(["view", str(expert_bag), "--save", str(rrd)]) == 0
    assert str(rrd) in capsys.readouterr().out
    counts = {name: topic.message_count for name, topic in bag_info(expert_bag).topics.items()}
    rows = rrd_rows(rrd)
    for topic, entities in ROWS_PER_MESSAGE.items():
        for entity in entities:
            assert rows.get(entity, 0) == counts.get(topic, 0), (topic, entity)
    assert rows[L.BOX] == counts["/objects"]
    # The collected episode succeeds: its last state is on the state timeline.
    states = []
    for chunk in RrdReader(rrd).stream():
        if chunk.entity_path.lstrip("/") == L.EPISODE_STATE and not chunk.is_static:
            states += [row[0] for row in chunk.to_record_batch().column("StateChange:state").to_pylist()]
    assert states == [json.loads(m.msg.data)["state"] for m in read_bag(expert_bag, ["/episode"])]
    assert states[-1] == "success"


@pytest.mark.slow
@pytest.mark.unit
def test_several_bags_save_one_rrd_each(expert_bag, policy_bag, tmp_path):
    out = tmp_path / "rrds"
    results = view_bags([expert_bag, policy_bag], save=out, report=lambda line: None)
    assert sorted(p.name for p in out.iterdir()) == ["episode_3.rrd", "live_run.rrd"]
    assert [r.rrd.parent for r in results] == [out, out]


def _run_view(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arm_act.cli", "view", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.unit
@pytest.mark.parametrize("kind", ["empty_dir", "empty_mcap", "garbage_mcap", "truncated", "missing"])
def test_view_refuses_bags_it_cannot_show_in_one_line(kind, tmp_path, policy_bag):
    bag = tmp_path / "bag"
    if kind != "missing":
        bag.mkdir()
    if kind == "empty_mcap":
        (bag / "bag_0.mcap").write_bytes(b"")
    elif kind == "garbage_mcap":
        (bag / "bag_0.mcap").write_bytes(np.random.default_rng(0).bytes(5000))
        (bag / "metadata.yaml").write_text((policy_bag / "metadata.yaml").read_text().replace("live_run", "bag"))
    elif kind == "truncated":
        source = next(policy_bag.glob("*.mcap"))
        (bag / "bag_0.mcap").write_bytes(source.read_bytes()[:3000])  # inside the first chunk
    result = _run_view(bag, "--save", tmp_path / "out.rrd")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("arm-act view: error: ") and str(bag) in lines[0], result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "out.rrd").exists()


@pytest.mark.unit
def test_view_without_an_output_and_display_needs_web(policy_bag, monkeypatch):
    from arm_act.view import ViewerError

    with pytest.raises(ViewerError, match="--save, --web"):
        view_bags([policy_bag])


@pytest.mark.ros
def test_live_bridge_logs_what_it_receives_over_dds(ros_context, tmp_path):
    """RerunBridge on a private context: sim-time /clock, joint states, an image, the
    attention and an episode; the .rrd holds them on the sim-time timeline."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import Float32MultiArray, String

    from arm_act.ros import conversions as conv
    from arm_act.ros.qos import TRANSIENT_LOCAL
    from arm_act.view.live import RerunBridge
    from arm_act.view.sinks import open_recording

    rrd = tmp_path / "live.rrd"
    rec = open_recording("test", save=rrd)
    bridge = RerunBridge(rec, context=ros_context)
    talker = rclpy.create_node("talker", context=ros_context)
    publishers = {
        "/clock": talker.create_publisher(Clock, "/clock", 10),
        "joint_states": talker.create_publisher(JointState, "joint_states", 10),
        "image": talker.create_publisher(Image, "camera/front/image_raw", 10),
        "attention": talker.create_publisher(Float32MultiArray, "policy/attention", 10),
        "episode": talker.create_publisher(String, "episode", TRANSIENT_LOCAL),
    }
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(bridge)
    with spinning(executor):
        assert wait_for(lambda: all(p.get_subscription_count() > 0 for p in publishers.values()), 10.0)
        publishers["/clock"].publish(conv.clock_msg(2.0))
        assert wait_for(lambda: bridge.get_clock().now().nanoseconds == 2_000_000_000, 10.0)
        info = conv.EpisodeInfo(episode=0, seed=1, n_blocks=2, state="running",
                                instruction="put the red block in the box", time=0.0, start=2.0)
        grids = {"front": np.eye(GRID, dtype=np.float32), "wrist": np.ones((GRID, GRID), np.float32)}
        messages = [("episode", conv.episode_msg(info))]
        messages += [("joint_states", conv.joint_state_msg(2.0, _q(k), np.zeros(9), np.zeros(9))) for k in range(5)]
        messages += [("image", conv.image_msg(2.0, np.full((96, 96, 3), 90, np.uint8), "front")),
                     ("attention", conv.attention_msg(grids, ("front", "wrist")))]
        for count, (name, msg) in enumerate(messages, start=1):  # one at a time: sensor QoS drops a burst
            publishers[name].publish(msg)
            assert wait_for(lambda count=count: bridge.messages >= count, 10.0), (name, bridge.messages)
    bridge.close()
    rec.disconnect()
    bridge.destroy_node()
    talker.destroy_node()
    rows = rrd_rows(rrd)
    assert rows[L.joint_actual("panda_joint1")] == 5 and rows[L.camera_image("front")] == 1
    assert rows[L.camera_attention("front")] == rows[L.camera_attention("wrist")] == 1
    assert rows[L.EPISODE_STATE] == 1
    times = set()
    for chunk in RrdReader(rrd).stream():
        if not chunk.is_static and L.TIMELINE in chunk.timeline_names:
            times |= {t.total_seconds() for t in chunk.to_record_batch().column(L.TIMELINE).to_pylist()}
    assert times == {2.0}  # everything at the sim time it arrived


@pytest.mark.unit
def test_attention_heat_map_follows_the_weights():
    from arm_act.common.viz import attention_rgba

    grid = np.zeros((GRID, GRID), np.float32)
    grid[1, 4] = 2.0
    grid[5, 0] = 1.0
    rgba = attention_rgba(grid, 96, 96)
    assert rgba.shape == (96, 96, 4) and rgba.dtype == np.uint8
    patch = 96 // GRID
    alpha = rgba[:, :, 3].reshape(GRID, patch, GRID, patch)
    assert (alpha.min(axis=(1, 3)) == alpha.max(axis=(1, 3))).all()  # constant per patch
    assert alpha[1, 0, 4, 0] > alpha[5, 0, 0, 0] > 0 == alpha[0, 0, 0, 0]  # brightest where attended


@pytest.mark.unit
def test_video_frame_gains_a_joint_strip_and_old_callers_still_work():
    from arm_act.common.viz import JOINT_COLOURS, JointStrip, compose_frame

    images = {"front": np.full((96, 96, 3), 100, np.uint8), "wrist": np.full((96, 96, 3), 60, np.uint8)}
    plain = compose_frame(images, None, "put the red block in the box", "running", 0.04, 0.04, 1.0)
    strip = JointStrip(span_s=2.0, height=90)
    for k in range(300):  # 3 s at 100 Hz: the strip keeps the last 2 s
        q = HOME.copy()
        q[:7] = -2.5 + 0.8 * np.arange(7) + 0.1 * np.sin(k / 50)  # apart, so no line covers another
        strip.add_state(1.0 + k / 100, q)
        strip.add_command(1.0 + k / 100, q[:7], 0.04)
    framed = compose_frame(images, None, "put the red block in the box", "running", 0.04, 0.04, 1.0, strip=strip)
    assert framed.shape == (plain.shape[0] + 90, plain.shape[1], 3)
    np.testing.assert_array_equal(framed[: plain.shape[0]], plain)
    drawn = framed[plain.shape[0]:]
    for colour in JOINT_COLOURS:  # every joint has its line
        assert (np.abs(drawn.astype(int) - colour).sum(axis=2) < 30).sum() > 20, colour
    assert (drawn == 255).all(axis=2).sum() > 50  # the gripper opening, white
    with pytest.raises(ValueError, match="span_s"):
        JointStrip(span_s=0)


FOXGLOVE_PANELS = {"Image", "3D", "Plot", "DiagnosticSummary", "DiagnosticStatusPanel", "StateTransitions",
                   "RawMessages"}


def _leaves(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    assert set(node) >= {"first", "second", "direction"} and node["direction"] in ("row", "column"), node
    return _leaves(node["first"]) + _leaves(node["second"])


@pytest.mark.unit
def test_foxglove_layout_names_live_topics_and_real_fields():
    """config/foxglove_layout.json: every panel of the layout tree is configured (and no other),
    every topic it reads is one the live system publishes, every message path's first field
    exists in that topic's message type."""
    from arm_act.bags import live_topic_types, typestore

    doc = json.loads((Path(__file__).resolve().parents[1] / "config" / "foxglove_layout.json").read_text())
    assert set(doc) >= {"configById", "layout", "globalVariables", "userNodes", "playbackConfig"}
    leaves = _leaves(doc["layout"])
    assert sorted(leaves) == sorted(doc["configById"]) and len(set(leaves)) == len(leaves)
    assert {panel.split("!")[0] for panel in leaves} == FOXGLOVE_PANELS
    types = {("/" + name).replace("//", "/"): t for name, t in live_topic_types().items()}
    fields = typestore().fielddefs

    def check(path: str) -> str:
        topic, _, rest = path.partition(".")
        assert topic in types, path
        if rest:
            first = rest.split("[")[0].split(".")[0]
            assert first in {name for name, _ in fields[types[topic]][1]}, path
        return topic

    read = set()
    for config in doc["configById"].values():
        mode = config.get("imageMode", {})
        read |= {check(mode[k]) for k in ("imageTopic", "calibrationTopic") if k in mode}
        read |= {check(p["value"]) for p in config.get("paths", [])}
        read |= {check(config[k]) for k in ("topicPath", "topicToRender") if k in config}
        read |= {check(topic) for topic in config.get("topics", {})}
    assert {"/camera/front/image_raw", "/camera/wrist/image_raw", "/joint_states", "/arm_controller/commands",
            "/gripper_controller/commands", "/policy/diagnostics", "/episode", "/objects"} <= read


@pytest.mark.slow
@pytest.mark.unit
def test_web_viewer_listens_on_localhost_only_and_dies_with_its_parent():
    import os
    import signal
    import socket
    import time

    code = ("from arm_act.view import WebViewer; import time; w = WebViewer(0); "
            "print(w.process.pid, w.web_port, w.grpc_port, flush=True); time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        server, web_port, grpc_port = (int(v) for v in parent.stdout.readline().split())
        for port in (web_port, grpc_port):
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
        # /proc/net/tcp: "local_address" is hex IP:port, state 0A is LISTEN.
        rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
        bound = {row[1] for row in rows if row[3] == "0A" and int(row[1].split(":")[1], 16) in (web_port, grpc_port)}
        assert bound == {f"0100007F:{web_port:04X}", f"0100007F:{grpc_port:04X}"}, bound  # 127.0.0.1, not 0.0.0.0
        os.kill(parent.pid, signal.SIGKILL)  # no cleanup code runs in the parent
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(server, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(server, signal.SIGTERM)
            pytest.fail("the web viewer outlived the process that started it")
    finally:
        if parent.poll() is None:
            parent.kill()


@pytest.mark.unit
def test_a_namespaced_bag_shows_the_same(policy_bag, tmp_path):
    """A bag of `ros2 launch arm_act bringup.launch.py namespace:=robot1` has /robot1/... topics."""
    bag = tmp_path / "robot1_run"
    with BagWriter(bag, live_topic_specs(namespace="/robot1")) as writer:
        for message in read_bag(policy_bag):
            topic = message.topic if message.topic == "/clock" else "/robot1" + message.topic
            writer.write(topic, message.timestamp_ns, message.msg)
    plain, spaced = tmp_path / "plain.rrd", tmp_path / "spaced.rrd"
    view_bags([policy_bag], save=plain, report=lambda line: None)
    view_bags([bag], save=spaced, report=lambda line: None)
    assert rrd_rows(spaced) == rrd_rows(plain)
    assert rrd_rows(spaced)[L.camera_attention("wrist")] > 0
