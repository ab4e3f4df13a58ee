"""sim_node in realtime renders a camera tick ahead of its time: the joint-state step before a
camera tick runs its physics step and the render as soon as the controllers' commands for
the tick before are in (SimLoop.runs_ahead), and that step's joint state still goes out
at its own time, exactly once and in order."""
import time

import pytest
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray

from arm_act.nodes.sim_node import SimNode
from arm_act.ros import conversions as conv
from tests.conftest import spinning_nodes, wait_for


def _sim(ros_context, **params):
    params = dict(mode="realtime", real_time_factor=1.0, episodes=1, episode_time_limit=60.0, use_sim_time=True,
                  **params)
    return SimNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


@pytest.mark.ros
@pytest.mark.parametrize("camera_rate, ahead", [(10, [9, 19, 29]), (50, [1, 3, 5, 7, 9])])
def test_the_step_before_each_camera_tick_runs_ahead(ros_context, camera_rate, ahead):
    sim = _sim(ros_context, camera_rate=camera_rate)
    try:
        assert [s for s in range(30) if sim.loop.runs_ahead(s)][:len(ahead)] == ahead
        sim.loop.mode = "lockstep"  # lockstep has no steps between control ticks to run ahead in
        assert not any(sim.loop.runs_ahead(s) for s in range(30))
    finally:
        sim.destroy_node()


@pytest.mark.ros
@pytest.mark.alone  # renders ahead of the wall clock: needs the CPU it would have without other tests
def test_camera_ticks_render_before_their_time_and_no_joint_state_is_lost(ros_context):
    sim = _sim(ros_context, camera_rate=10)
    renders = []  # (wall time, sim time of the world rendered)
    render = sim.env.render

    def timed_render(*args, **kwargs):
        renders.append((time.monotonic(), sim.sim_time))
        return render(*args, **kwargs)

    sim.env.render = timed_render
    client = Node("client", context=ros_context)
    arm_pub = client.create_publisher(Float64MultiArray, conv.ARM_COMMAND_TOPIC, 10)
    gripper_pub = client.create_publisher(Float64MultiArray, conv.GRIPPER_COMMAND_TOPIC, 10)
    states, images = [], []  # (sim ns, wall receipt)

    def on_state(msg):
        stamp = conv.stamp_to_ns(msg.header.stamp)
        states.append((stamp, time.monotonic()))
        if round(stamp / 1e7) % 2 == 0:  # a control tick: answer it at once, holding the pose
            arm_pub.publish(Float64MultiArray(data=list(msg.position[:7])))
            gripper_pub.publish(Float64MultiArray(data=[0.04]))

    client.create_subscription(JointState, "joint_states", on_state, 50)
    client.create_subscription(Image, "camera/front/image_raw",
                               lambda m: images.append((conv.stamp_to_ns(m.header.stamp), time.monotonic())), 10)
    with spinning_nodes(ros_context, sim, client):
        assert wait_for(lambda: len(images) >= 12, timeout=60)
    # Every 10 ms step's joint state arrived once and in order, the deferred ones included.
    stamps = [s for s, _ in states]
    first = stamps.index(min(s for s, _ in images))  # from the episode's first camera tick on
    steps = [round(s / 1e7) for s in stamps[first:]]
    assert steps == list(range(steps[0], steps[0] + len(steps))), steps
    # The deferred joint states (the steps before camera ticks) went out at their own step's
    # time, not with the camera tick's physics step: wall minus sim time of each is within
    # 3 ms of the smallest of the regular steps' (less than the 10 ms a step early would be;
    # a deferred message is built before its wait, a regular one after it).
    wall_of = {s: w for s, w in states}
    offset = {s: wall_of[s] - s / 1e9 for s in stamps[first:]}
    regular = [o for s, o in offset.items() if round(s / 1e7) % 10 != 9]
    deferred = {round(s / 1e7): o for s, o in offset.items() if round(s / 1e7) % 10 == 9}
    assert deferred and all(o >= min(regular) - 0.003 for o in deferred.values()), \
        {k: round((o - min(regular)) * 1e3, 2) for k, o in deferred.items()}
    # The camera ticks after the first were rendered before the step before them was due
    # (by the episode's clock): the render no longer waits for that step's time, only for the
    # commands answering the tick before (sent here as soon as its joint state came).
    # An overrun moves the episode's clock later for good (the loop continues from the late
    # step), so each step's due time comes from the regular steps just before it, not the
    # episode's earliest.
    def due(stamp):  # the step's wall time by the earliest receipt of the 8 regular steps before
        window = [o for s, o in offset.items()
                  if stamp - 90_000_000 <= s < stamp and round(s / 1e7) % 10 != 9]
        return stamp / 1e9 + min(window or regular)

    ahead = 0
    camera_ticks = [s for s, _ in images[1:]]
    for tick in camera_ticks:
        rendered = [w for w, sim_s in renders if abs(sim_s * 1e9 - tick) < 1e6]
        if rendered and rendered[-1] < due(tick - 10_000_000) - 0.001:
            ahead += 1
    assert ahead >= len(camera_ticks) // 2, (ahead, len(camera_ticks))
