"""sim_node in realtime after an overrun (a publication reached more than half a control period
after its time: a long physics step, or the whole machine stopped): it continues from there,
skipping the wall time lost as ros2_control_node skips missed cycles, instead of publishing the
next ticks in a burst the controllers cannot answer in time; and it says so in its diagnostics."""
import itertools
import time

import pytest
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from arm_act.nodes.sim_node import SimNode
from arm_act.ros import conversions as conv
from tests.conftest import spinning_nodes, wait_for

STALL_S = 0.045
STALL_AT_STEP = 44  # the episode's env steps, from its start (a plain joint-state step)


@pytest.mark.ros
def test_after_a_stalled_step_the_ticks_keep_their_periods_and_the_overrun_is_reported(ros_context):
    params = dict(mode="realtime", real_time_factor=1.0, episodes=1, episode_time_limit=60.0, use_sim_time=True,
                  camera_rate=10)
    sim = SimNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    step = sim.env.step
    steps = []

    def stalling_step():  # one physics step that takes STALL_S longer, as a stopped machine would
        steps.append(sim.sim_time)
        if len(steps) == STALL_AT_STEP:
            time.sleep(STALL_S)
        step()

    sim.env.step = stalling_step
    # When each joint state left sim_node (sim s, wall s): the sender's pacing, free of the
    # delivery jitter a loaded machine adds on the way to a subscriber.
    sent = []
    publish = sim.joint_pub.publish

    def timed_publish(msg):
        sent.append((conv.stamp_to_ns(msg.header.stamp) / 1e9, time.monotonic()))
        publish(msg)

    sim.joint_pub.publish = timed_publish
    client = Node("client", context=ros_context)
    arm_pub = client.create_publisher(Float64MultiArray, conv.ARM_COMMAND_TOPIC, 10)
    gripper_pub = client.create_publisher(Float64MultiArray, conv.GRIPPER_COMMAND_TOPIC, 10)
    def on_state(msg):
        stamp = conv.stamp_to_ns(msg.header.stamp)
        if round(stamp / 1e7) % 2 == 0:  # a control tick: answer it at once, holding the pose
            arm_pub.publish(Float64MultiArray(data=list(msg.position[:7])))
            gripper_pub.publish(Float64MultiArray(data=[0.04]))

    client.create_subscription(JointState, "joint_states", on_state, 50)
    with spinning_nodes(ros_context, sim, client):
        assert wait_for(lambda: len(steps) >= STALL_AT_STEP + 40, timeout=60)
        values = sim.loop_timing.values()
    assert int(values["loop_overruns"]) >= 1 and float(values["loop_skipped_ms"]) >= 20.0, values
    assert float(values["loop_late_max_ms"]) >= 35.0, values
    # The joint states after the stalled step went out about a step period apart (10 ms at
    # 100 Hz), not in a burst: catching up, the four steps the stall took went out back to
    # back (~0.3 ms apart). A loaded machine delays single publications (a late one is followed
    # by a short gap), so the check is for a burst: no two gaps in a row under 5 ms.
    stalled_sim = steps[STALL_AT_STEP - 1]
    after = [w for s, w in sent if s > stalled_sim][:11]
    gaps = [round((b - a) * 1e3, 1) for a, b in itertools.pairwise(after)]
    assert len(gaps) == 10 and not any(a < 5.0 and b < 5.0 for a, b in itertools.pairwise(gaps)), gaps
