"""What real time costs, fixed in the nodes: the episode boundary and camera-pair pairing of
policy_node in realtime, sim_node's episodes on the control-period grid, and the live
evaluation (`arm-act eval --live`) that measures it."""
import json

import numpy as np
import pytest
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

from arm_act.ros import conversions as conv
from tests.conftest import spinning, wait_for


def _params(**values):
    return [Parameter(k, value=v) for k, v in values.items()] + [Parameter("use_sim_time", value=True)]


class _Feed:
    """Drives a PolicyNode's callbacks in a chosen order (the order DDS may deliver them in)."""

    def __init__(self, policy):
        self.policy = policy

    def joints(self, t, value):
        q = np.zeros(9)
        q[0] = value  # within the joint limits (the node rejects states outside them)
        self.policy.joint_state_callback(JointState(header=conv.header(t, ""), name=list(conv.JOINT_NAMES),
                                                    position=[float(v) for v in q], velocity=[0.0] * 9,
                                                    effort=[0.0] * 9))

    def pair(self, t):
        for name in ("front", "wrist"):
            self.policy.image_callback(name, conv.image_msg(t, np.full((96, 96, 3), 120, np.uint8), name))

    def clock(self, t):
        self.policy.clock_tick_callback(Clock(clock=conv.to_stamp(t)))

    def episode(self, episode, state, start, time=0.0):
        info = conv.EpisodeInfo(episode=episode, seed=episode, n_blocks=3, state=state,
                                instruction="put the red block in the box", time=time, start=start)
        self.policy.episode_callback(conv.episode_msg(info))


@pytest.mark.ros
def test_realtime_episode_starts_from_its_own_reset_pose(ros_context, tiny_checkpoint):
    """sim_node sends /clock at an episode's start twice (with the episode, then with its first
    observation); the tick on the second one acts on the previous episode's last joint state.
    The selector must start the new episode from the new episode's pose: reset from the old
    one, the joint-speed limiter steered the first commands back to where the last episode
    ended (live, seed 100001 failed in 0.75 s that way)."""
    from arm_act.nodes.policy_node import PolicyNode

    policy = PolicyNode(context=ros_context,
                        parameter_overrides=_params(mode="realtime", checkpoint=str(tiny_checkpoint)))
    policy._submit = lambda stamp, tick=None, joints=None: None  # no inference: the pose is what is checked
    feed = _Feed(policy)
    try:
        feed.episode(0, "running", 1.0)
        feed.clock(1.0)
        feed.pair(1.0)
        feed.joints(1.0, 0.5)
        assert policy.selector.held[0][0] == 0.5
        feed.episode(0, "success", 1.0, time=1.0)
        feed.clock(2.0)
        feed.joints(2.0, 0.5)  # the hold: the old episode's final pose
        # Episode 1: /clock at its start, the episode, /clock again, then its observation.
        feed.clock(2.02)
        feed.episode(1, "running", 2.02)
        feed.clock(2.02)  # the tick acts now, on the old pose...
        feed.pair(2.02)
        feed.joints(2.02, -0.5)  # ... and this is the new episode's reset pose
        assert policy.selector.held[0][0] == -0.5
        assert policy.selector.limiter._previous[0] == -0.5
    finally:
        policy.destroy_node()


@pytest.mark.ros
def test_realtime_pair_uses_the_joint_state_of_its_own_tick(ros_context, tiny_checkpoint):
    """When the next joint state overtakes a camera pair (images are large), the pair is still
    inferred with the joint state stamped like it, as in process."""
    from arm_act.nodes.policy_node import PolicyNode

    policy = PolicyNode(context=ros_context,
                        parameter_overrides=_params(mode="realtime", checkpoint=str(tiny_checkpoint)))
    submitted = []
    policy._submit = lambda stamp, tick=None, joints=None: submitted.append(
        (stamp, (policy.joint_positions if joints is None else joints).copy()))
    feed = _Feed(policy)
    try:
        feed.episode(0, "running", 1.0)
        feed.joints(1.2, 0.2)
        feed.joints(1.21, 0.3)  # the next step's joint state came before the images of 1.2
        feed.pair(1.2)
        assert [s for s, _ in submitted] == [conv.stamp_to_ns(conv.to_stamp(1.2))]
        assert submitted[0][1][0] == 0.2
        assert policy.stats["pairs_joint_mismatch"] == 0
    finally:
        policy.destroy_node()


@pytest.mark.ros
def test_realtime_episodes_start_on_the_control_grid(ros_context):
    """An episode can end between two control ticks (status is checked at the joint-state
    rate); the next one must still start on a multiple of the control period, where the
    controllers' ticks fall."""
    from arm_act.nodes.sim_node import SimNode

    sim = SimNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in dict(
        mode="realtime", real_time_factor=0.0, episodes=3, seed=0, blocks="2", episode_time_limit=0.15,
        reset_pause=0.1, wait_for_controller=False, exit_when_done=False).items()])
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(sim)
    try:
        with spinning(executor):
            assert wait_for(lambda: len(sim.finished) >= 3, timeout=60)
        steps = [round(info.time * sim.step_rate) for info in sim.finished]
        assert steps[0] % sim.steps_per_command == 1  # ended between two control ticks
        for info in sim.finished:
            assert (info.start_ns * sim.control_rate) % 1_000_000_000 == 0, info
    finally:
        sim.destroy_node()


@pytest.mark.unit
def test_live_records_and_comparison():
    """A live episode's real-time diagnostics from what the probe saw, and the comparison."""
    from arm_act.eval.live import _Episode, compare, episode_record, realtime_totals

    start = conv.EpisodeInfo(episode=0, seed=7, n_blocks=3, state="running", instruction="x", time=0.0, start=2.01)
    episode = _Episode(start)
    t0 = start.start_ns
    episode.commands = [(0.02 * i, t0 + 20_000_000 * i) for i in range(5)] + [(0.2, t0 + 20_000_000 * 7)]
    episode.chunks = [(t0, t0 + 10_000_000), (t0 + 100_000_000, t0 + 130_000_000)]
    episode.inference_ms = [4.0, 6.0]
    episode.diag_start = {"missed_ticks": 1, "stale_ticks": 0, "chunks_timed": 5, "chunk_latency_ticks": 5,
                          "late_chunks": 0}
    final = conv.EpisodeInfo(episode=0, seed=7, n_blocks=3, state="success", instruction="x", time=0.14, start=2.01)
    record = episode_record(episode, final, {"missed_ticks": 3, "stale_ticks": 2, "chunks_timed": 7,
                                             "chunk_latency_ticks": 8, "late_chunks": 1})
    rt = record["realtime"]
    assert record["success"] and record["seed"] == 7
    assert rt["start_offset_ms"] == pytest.approx(10.0)
    assert rt["missed_ticks_sim"] == 2  # a 60 ms gap
    assert rt["probe_chunk_latency_ticks"] == {"1": 1, "2": 1}
    assert rt["camera_pairs"] == 2 and rt["pairs_without_chunk"] == 0
    assert rt["missed_ticks"] == 2 and rt["stale_ticks"] == 2
    assert rt["late_chunks"] == 1 and rt["chunk_latency_ticks_mean"] == 1.5
    assert realtime_totals([record])["episodes_off_control_grid"] == 1
    live = [dict(seed=s, success=ok) for s, ok in [(1, True), (2, False), (3, True), (4, False)]]
    in_process = [dict(seed=s, success=ok) for s, ok in [(1, True), (2, True), (3, False), (4, False)]]
    result = compare(live, in_process)
    assert result["failed_live_only"] == [2] and result["failed_in_process_only"] == [3]
    assert result["failed_both"] == [4] and result["difference_points"] == 0.0
    assert result["live"]["successes"] == 2 and result["live"]["ci95"][0] < 0.5 < result["live"]["ci95"][1]
    json.dumps(record)


@pytest.mark.e2e
def test_eval_live_runs_the_nodes_in_real_time(tmp_path, capsys):
    """`arm-act eval --live`: sim_node and expert_node as child processes in real time, a line
    per episode, the JSON with each episode's real-time diagnostics."""
    from arm_act.cli import main as cli

    out = tmp_path / "live.json"
    status = cli.main(["eval", "--policy", "expert", "--live", "--episodes", "2", "--seed", "5", "--blocks", "2",
                       "--time-limit", "1.0", "--out", str(out), "--logs", str(tmp_path / "logs")])
    err = capsys.readouterr().err
    assert status == 0, err
    summary = json.loads(out.read_text())
    assert [r["seed"] for r in summary["results"]] == [5, 6]
    assert all(r["status"] == "timeout" for r in summary["results"])
    # (The probe may match the expert's command topic a moment into the first episode.)
    assert summary["results"][1]["realtime"]["commands"] > 10, err
    assert all(r["realtime"]["start_offset_ms"] == 0 for r in summary["results"])
    assert (tmp_path / "logs" / "sim_node.log").is_file()
    assert "live   2/2 seed 6" in err


@pytest.mark.ros
def test_realtime_command_acts_from_the_next_step(ros_context):
    """In realtime every command arrives after its tick's observation went out; sim_node
    applies it at the next physics step (10 ms at 100 Hz), not at the next control tick: a
    whole control period of extra delay that in-process evaluation never has."""
    from sensor_msgs.msg import JointState as JointStateMsg
    from std_msgs.msg import Float64MultiArray

    from arm_act.nodes.sim_node import SimNode

    sim = SimNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in dict(
        mode="realtime", real_time_factor=0.1, episodes=1, seed=0, blocks="2", episode_time_limit=5.0,
        wait_for_controller=False, exit_when_done=False).items()])
    from rclpy.node import Node

    node = Node("controller_probe", context=ros_context)
    arm_pub = node.create_publisher(Float64MultiArray, conv.ARM_COMMAND_TOPIC, 10)
    gripper_pub = node.create_publisher(Float64MultiArray, conv.GRIPPER_COMMAND_TOPIC, 10)
    states: dict[int, np.ndarray] = {}
    sent: list[int] = []
    period = 1_000_000_000 // sim.control_rate

    def on_state(msg):
        stamp = conv.stamp_to_ns(msg.header.stamp)
        states[stamp] = np.asarray(msg.velocity)
        start = sim.episode_start * 1e9
        if not sent and stamp >= start + 0.1e9 and round(stamp - start) % period == 0:
            sent.append(stamp)  # a control tick's observation: answer it, as a controller does
            target = np.asarray(msg.position[:7]) + np.array([0.5, 0, 0, 0, 0, 0, 0])
            gripper_pub.publish(conv.float_array_msg([0.04]))
            arm_pub.publish(conv.float_array_msg(target))

    node.create_subscription(JointStateMsg, "joint_states", on_state, 10)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(sim)
    executor.add_node(node)
    try:
        with spinning(executor):
            assert wait_for(lambda: sent and sent[0] + 3 * period // 2 in states, timeout=30)
        tick = sent[0]
        half = period // 2  # one physics step at the joint-state rate
        assert abs(states[tick + half][0]) < 0.02  # not yet: it arrived after this step began
        assert abs(states[tick + period][0]) > 0.05, states[tick + period][0]  # moving before the next tick
    finally:
        sim.destroy_node()
        node.destroy_node()
