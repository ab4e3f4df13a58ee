"""sim_node's own count of command delivery per control period (realtime): the ground truth
the bench reads from sim/diagnostics (arm_act/bench/over_dds.py, missed_ticks_at_sim)."""
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from arm_act.nodes.sim_node import SimNode
from arm_act.ros import conversions as conv
from tests.conftest import spin_until

SKIP_EVERY = 5


@pytest.mark.ros
def test_realtime_counts_control_periods_without_a_new_command(ros_context):
    params = dict(mode="realtime", real_time_factor=1.0, episodes=1, episode_time_limit=60.0, use_sim_time=True)
    sim = SimNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    client = Node("client", context=ros_context)
    arm_pub = client.create_publisher(Float64MultiArray, conv.ARM_COMMAND_TOPIC, 10)
    answered, skipped, diagnostics = [], [], []

    def on_state(msg):
        steps = round(conv.stamp_to_ns(msg.header.stamp) / 1e7)  # 10 ms joint-state steps
        if steps % 2:
            return  # between control ticks (50 Hz control, 100 Hz joint states)
        tick = steps // 2
        if tick % SKIP_EVERY == 0:
            skipped.append(tick)  # this tick's period gets no command
            return
        answered.append(tick)
        arm_pub.publish(Float64MultiArray(data=list(msg.position[:7])))  # hold the pose

    client.create_subscription(JointState, "joint_states", on_state, 10)
    client.create_subscription(DiagnosticArray, "sim/diagnostics",
                               lambda m: diagnostics.extend({kv.key: kv.value for kv in s.values} for s in m.status),
                               10)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(sim)
    executor.add_node(client)
    try:
        assert spin_until(executor, lambda: sim.control_periods >= 100, timeout=60)
        periods, without, extra = sim.control_periods, sim.periods_without_command, sim.extra_commands
        # One period in SKIP_EVERY has no command; a command late past the next tick would add
        # one period without and one extra, so without - extra is the skipped count either way.
        assert abs((without - extra) - periods / SKIP_EVERY) <= 2, (periods, without, extra)
        assert without >= periods / SKIP_EVERY - 2
        assert extra <= periods / 10, (periods, without, extra)
        assert spin_until(executor, lambda: any(int(d.get("periods_without_command", 0)) >= without
                                                for d in diagnostics), timeout=10)
        last = diagnostics[-1]
        assert int(last["control_periods"]) >= periods and int(last["extra_commands"]) >= extra
        assert answered and skipped
    finally:
        sim.destroy_node()
        client.destroy_node()
        executor.shutdown()
