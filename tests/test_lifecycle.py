"""policy_node as a managed node, driven through its lifecycle_msgs services and `ros2 param
set`'s service, over real DDS: a bad checkpoint fails configure with the reason and the node
lives on; live parameters take effect and bad values are refused with a reason; deactivate
during an episode holds the arm where it is, activate resumes, cleanup releases the model."""
from __future__ import annotations

import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rcl_interfaces.srv import SetParameters
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from arm_act.nodes.policy_node import PolicyNode
from arm_act.policy.runtime import ChunkQueue
from arm_act.ros import conversions as conv
from tests.conftest import spinning, wait_for

pytestmark = pytest.mark.ros



def _params(**values):
    return [Parameter(k, value=v) for k, v in values.items()] + [Parameter("use_sim_time", value=True)]


class Operator:
    """What `ros2 lifecycle set` and `ros2 param set` do, as a node with service clients."""

    def __init__(self, context, target="policy_node"):
        self.node = Node("operator", context=context)
        self.change = self.node.create_client(ChangeState, f"{target}/change_state")
        self.get = self.node.create_client(GetState, f"{target}/get_state")
        self.set = self.node.create_client(SetParameters, f"{target}/set_parameters")
        self.diagnostics = []
        self.node.create_subscription(DiagnosticArray, "policy/diagnostics", self.diagnostics.append, 10)

    def transition(self, transition_id: int) -> bool:
        assert self.change.wait_for_service(timeout_sec=10)
        return self.change.call(ChangeState.Request(transition=Transition(id=transition_id)), timeout_sec=30).success

    def state(self) -> str:
        assert self.get.wait_for_service(timeout_sec=10)
        return self.get.call(GetState.Request(), timeout_sec=10).current_state.label

    def set_parameter(self, name, value):
        assert self.set.wait_for_service(timeout_sec=10)
        request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
        (result,) = self.set.call(request, timeout_sec=10).results
        return result.successful, result.reason

    def diagnostic(self, key):
        values = {kv.key: kv.value for kv in self.diagnostics[-1].status[0].values}
        return values.get(key)


def test_bad_checkpoint_fails_configure_with_a_reason_and_the_node_lives(ros_context, tiny_checkpoint, tmp_path):
    missing = tmp_path / "no_such_checkpoint"
    policy = PolicyNode(context=ros_context, parameter_overrides=_params(autostart=False, checkpoint=str(missing)))
    operator = Operator(ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(policy)
    executor.add_node(operator.node)
    try:
        with spinning(executor):
            assert operator.state() == "unconfigured"
            assert operator.transition(Transition.TRANSITION_CONFIGURE) is False
            assert operator.state() == "unconfigured"  # failed, back where it was, and alive
            assert str(missing) in policy.last_error and "configure failed" in policy.last_error
            assert wait_for(lambda: operator.diagnostics and operator.diagnostic("last_error") != "none", timeout=10)
            assert str(missing) in operator.diagnostic("last_error")
            assert "configure" in operator.diagnostic("waiting_for")
            # Unconfigured: the checkpoint may change; then configure and activate work.
            assert operator.set_parameter("checkpoint", str(tiny_checkpoint)) == (True, "")
            ok, reason = operator.set_parameter("regrasps", -1)
            assert not ok and "regrasps must be in 0 .. 100" in reason
            assert operator.set_parameter("regrasps", 1) == (True, "")
            ok, reason = operator.set_parameter("regrasp_retry", "again")
            assert not ok and "regrasp_retry must be one of ['reflex', 'policy']" in reason
            assert operator.set_parameter("regrasp_retry", "policy") == (True, "")
            assert policy.get_parameter("assist").value is False  # the default: the network alone
            assert operator.transition(Transition.TRANSITION_CONFIGURE) is True
            assert operator.state() == "inactive" and policy.runtime is not None
            assert policy.selector.aim is None  # assist false: the chunks as they are
            assert policy.runtime.colour_balance is None  # ... and the images as rendered
            assert wait_for(lambda: operator.diagnostics and operator.diagnostic("assist") == "off"
                            and operator.diagnostic("colour_gains") == "off", timeout=10)
            ok, reason = operator.set_parameter("assist", True)
            assert not ok and "read at configure" in reason
            assert operator.transition(Transition.TRANSITION_CLEANUP) is True
            assert operator.set_parameter("assist", True) == (True, "")
            assert operator.transition(Transition.TRANSITION_CONFIGURE) is True
            assert policy.runtime.colour_balance is not None  # the checkpoint has a colour reference
            assert wait_for(lambda: operator.diagnostic("colour_gains") == "1.000 1.000 1.000", timeout=10)
            assert policy.selector.aim is not None and policy.selector.aim.settings.regrasps == 1
            assert policy.selector.aim.settings.retry == "policy" and policy.selector.aim.reflex is None
            assert wait_for(lambda: operator.diagnostic("regrasp") == "policy", timeout=10)
            ok, reason = operator.set_parameter("checkpoint", str(missing))
            assert not ok and "read at configure" in reason
            assert operator.transition(Transition.TRANSITION_ACTIVATE) is True
            assert operator.state() == "active"
            ok, reason = operator.set_parameter("mode", "lockstep")
            assert not ok and "fixed" in reason
    finally:
        policy.destroy_node()
        operator.node.destroy_node()


def test_live_parameters_take_effect_and_bad_values_are_refused(ros_context, tiny_checkpoint):
    policy = PolicyNode(context=ros_context, parameter_overrides=_params(checkpoint=str(tiny_checkpoint)))
    operator = Operator(ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(policy)
    executor.add_node(operator.node)
    try:
        with spinning(executor):
            assert operator.state() == "active"  # autostart (ros2 run)
            # What `ros2 param describe` shows, from InferenceConfig.
            described = policy.describe_parameter("regrasps")
            assert described.additional_constraints == "in 0 .. 100" and "re" in described.description
            for name, value, words in (("ensemble_m", -1.0, "ensemble_m must be"),
                                       ("ensemble_m", float("nan"), "ensemble_m must be"),
                                       ("execution", "fastest", "execution must be one of"),
                                       ("stale_timeout", 0.0, "stale_timeout must be"),
                                       ("max_joint_speed", 1e9, "max_joint_speed must be"),
                                       ("max_joint_speed", 2, "")):  # an integer for a double: rclpy refuses
                ok, reason = operator.set_parameter(name, value)
                assert not ok and words in reason, (name, value, reason)
            assert policy.get_parameter("ensemble_m").value == 0.1  # refused values never land
            assert operator.set_parameter("execution", "queue") == (True, "")
            assert isinstance(policy.runtime.executor, ChunkQueue) and policy.runtime.execution == "queue"
            assert operator.set_parameter("execution", "ensemble") == (True, "")
            assert operator.set_parameter("ensemble_m", 0.4) == (True, "")
            assert policy.runtime.executor.m == pytest.approx(0.4)
            assert operator.set_parameter("stale_timeout", 1.25) == (True, "")
            assert policy.stale_timeout_ns == 1_250_000_000
            assert operator.set_parameter("max_joint_speed", 1.5) == (True, "")
            assert policy.selector.limiter.max_step == pytest.approx(1.5 / 50)
    finally:
        policy.destroy_node()
        operator.node.destroy_node()


def test_deactivate_during_an_episode_holds_the_arm_and_cleanup_releases_the_model(ros_context, tiny_checkpoint):
    from arm_act.nodes.sim_node import SimNode

    sim = SimNode(context=ros_context, parameter_overrides=_params(mode="realtime", episodes=1,
                                                                   episode_time_limit=30.0))
    policy = PolicyNode(context=ros_context, parameter_overrides=_params(checkpoint=str(tiny_checkpoint)))
    operator = Operator(ros_context)
    states, commands = [], []
    # Joint states with their sim-time stamps: how long the arm has held is counted in sim time,
    # which a loaded machine stretches against the wall clock.
    operator.node.create_subscription(JointState, "joint_states", lambda m: states.append(
        (time.monotonic(), np.array(m.position), conv.stamp_to_ns(m.header.stamp) / 1e9)), 100)
    operator.node.create_subscription(Float64MultiArray, conv.ARM_COMMAND_TOPIC,
                                      lambda m: commands.append((time.monotonic(), np.array(m.data))), 100)
    executor = SingleThreadedExecutor(context=ros_context)
    for node in (sim, policy, operator.node):
        executor.add_node(node)
    try:
        with spinning(executor):
            # Active: the policy moves the arm away from its reset pose.
            assert wait_for(lambda: len(commands) > 20 and len(states) > 50, timeout=60)
            start = states[0][1][:7]
            assert wait_for(lambda: np.abs(states[-1][1][:7] - start).max() > 0.05, timeout=30), "never moved"
            assert operator.transition(Transition.TRANSITION_DEACTIVATE) is True
            deactivated = time.monotonic()
            deactivated_sim = policy.get_clock().now().nanoseconds / 1e9  # its /clock, in this process
            held = policy.hold_pose[0].copy()
            assert wait_for(lambda: states[-1][0] > deactivated + 2.0 and states[-1][2] > deactivated_sim + 2.0,
                            timeout=30)
            # Every command since is the pose at deactivation, and the arm stays there.
            # (Taken by this test's own executor, which may run behind on a loaded machine: 0.5 s.)
            after = [c for t, c in commands if t > deactivated + 0.5]
            assert len(after) > 20
            for command in after:
                np.testing.assert_allclose(command, held, atol=1e-12)
            late = np.array([q[:7] for _, q, stamp in states if stamp > deactivated_sim + 1.0])
            # It stopped where it was (the pose the node measured at the deactivation), within the
            # sim's position tracking error under gravity (joint 2 settles 0.07-0.27 rad lower,
            # measured; `arm-act report` shows the same error while the arm moves).
            assert np.abs(late - held).max() < 0.35

            def still() -> bool:  # the last half second of sim time: at rest, not drifting
                tail = np.array([q[:7] for _, q, stamp in list(states) if stamp > states[-1][2] - 0.5])
                return len(tail) > 10 and float(np.abs(tail - tail[0]).max()) < 0.005
            # A hand resting on a block or the table may hold by friction for a while and then
            # slip down to the same tracking error (seen once in CI, 1 s after deactivating): the
            # arm comes to rest and stays there.
            assert wait_for(still, timeout=20), "the held arm keeps moving"
            assert np.abs(states[-1][1][:7] - held).max() < 0.35
            assert sim.env.status() == "running"  # during the episode
            # Active again: it commands from the policy once more (no longer the hold).
            assert operator.transition(Transition.TRANSITION_ACTIVATE) is True
            reactivated = time.monotonic()
            assert wait_for(lambda: any(t > reactivated and np.abs(c - held).max() > 1e-6 for t, c in commands),
                            timeout=30)
            assert operator.transition(Transition.TRANSITION_DEACTIVATE) is True
            worker = policy.worker.thread
            assert operator.transition(Transition.TRANSITION_CLEANUP) is True
            assert operator.state() == "unconfigured"
            assert policy.runtime is None and policy.selector is None and not worker.is_alive()
            count, seen = len(commands), len(states)
            assert wait_for(lambda: len(states) > seen + 50, timeout=20)  # half a second of sim ticks...
            assert len(commands) <= count + 1  # ... in which nothing was commanded
    finally:
        for node in (sim, policy, operator.node):
            node.destroy_node()


def test_the_first_episode_waits_for_an_active_controller_not_just_a_publisher(ros_context, tiny_checkpoint):
    """A managed policy_node writes the command topic before it is configured; sim_node's
    first episode starts only once it is active (nodes/readiness.py), so an unconfigured or
    inactive controller (launch with autostart:=false) never loses an episode."""
    from arm_act.nodes.sim_node import SimNode

    sim = SimNode(context=ros_context, parameter_overrides=_params(mode="realtime", episodes=1))
    policy = PolicyNode(context=ros_context, parameter_overrides=_params(autostart=False,
                                                                         checkpoint=str(tiny_checkpoint)))
    operator = Operator(ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    for node in (sim, policy, operator.node):
        executor.add_node(node)
    try:
        with spinning(executor):
            assert wait_for(lambda: any("unconfigured" in w for w in sim.waiting), timeout=20), sim.waiting
            assert operator.transition(Transition.TRANSITION_CONFIGURE) is True
            assert wait_for(lambda: any("/policy_node (inactive)" in w for w in sim.waiting), timeout=20), sim.waiting
            time.sleep(1.0)
            assert sim.state == "waiting"  # no episode has started
            assert operator.transition(Transition.TRANSITION_ACTIVATE) is True
            assert wait_for(lambda: sim.state == "running", timeout=20), sim.waiting
    finally:
        for node in (sim, policy, operator.node):
            node.destroy_node()
