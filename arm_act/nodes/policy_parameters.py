"""policy_node's parameters: what it declares, which may change when, the reason a change is
refused, and the policy that configure loads from them.

Every inference setting comes from InferenceConfig (policy/inference_config.py), with its
one default, description and range (`ros2 param describe /policy_node assist` shows them).

Parameters that change live (`ros2 param set`): execution, ensemble_m, ensemble_m_after_change
and ensemble_after_change_s (from the next goal change on), gripper (binary: the command snapped
to open or closed; continuous), stale_timeout, max_joint_speed; bad values are refused with the
reason. checkpoint, backend, torch_threads, device, latency_ticks, assist, regrasps,
regrasp_retry and publish_attention are read at configure (set them while unconfigured). assist
(default false: the network alone) runs the hand-written layers around the network: colour
balance of the images (arm_act/policy/colour.py), the aim correction that steers the grasp onto
the target head's estimate of the named block, and a grasp check that reopens up to `regrasps`
(default 3) grasps an episode that closed on nothing (arm_act/assist/aim.py), each retried by
the re-grasp reflex (regrasp_retry "reflex", arm_act/assist/regrasp.py) or by the chunks
("policy"). device: cpu (default), auto, cuda or cuda:N for the torch model (policy/device.py);
a device that is not there fails the configure transition with the reason.
The rest (mode, control_rate, the camera topics, autostart, the thread priorities and
lock_memory) are fixed when the node starts.
"""
from __future__ import annotations

from pathlib import Path

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult

from arm_act.assist.panda import panda_aim
from arm_act.common import realtime
from arm_act.common.paths import default_checkpoint
from arm_act.nodes.scheduling import (
    AUTOMATIC_PRIORITY,
    inference_priority_for,
    lock_memory_descriptor,
    normal_when_unpaced,
    read_priority,
    thread_priority_descriptor,
)
from arm_act.policy.inference_config import InferenceConfig, describe_range, meta_name
from arm_act.policy.inference_config import fields as inference_fields
from arm_act.policy.runtime import BACKENDS, CommandLimiter, PolicyRuntime, make_executor
from arm_act.policy.selection import ActionSelector

# Parameters applied to the running policy by the on-set-parameters callback.
LIVE_PARAMETERS = tuple(meta_name(f) for f in inference_fields() if f.metadata["live"])
# Parameters read at configure: they may change only while unconfigured.
CONFIGURE_PARAMETERS = ("checkpoint", "backend", "torch_threads", "device", "latency_ticks", "assist",
                        "regrasps", "regrasp_retry", "publish_attention")
# Fixed when the node is created.
FIXED_PARAMETERS = ("mode", "control_rate", "front_topic", "wrist_topic", "autostart", "thread_priority",
                    "inference_thread_priority", "lock_memory", "image_timeout")
INFERENCE_PARAMETERS = {meta_name(f) for f in inference_fields()}


def check_live_value(name: str, value) -> str | None:
    """The reason a value of an inference parameter is refused (InferenceConfig's ranges), or
    None when it is fine or the parameter is not one of them."""
    return InferenceConfig.check(name, value) if name in INFERENCE_PARAMETERS else None


def refusal(name: str, value, lifecycle_state: str) -> str | None:
    """The reason `ros2 param set name value` is refused in `lifecycle_state`, or None: fixed
    parameters never change, configure-time ones only while unconfigured, and every value
    stays in its range."""
    if name in FIXED_PARAMETERS:
        return f"{name} is fixed when the node starts; restart it to change it"
    if name in CONFIGURE_PARAMETERS and lifecycle_state != "unconfigured":
        return (f"{name} is read at configure: deactivate and clean up the node first "
                f"(it is {lifecycle_state})")
    return check_live_value(name, value)


def declare_parameters(node) -> None:
    """Declare policy_node's own parameters (mode and control_rate are ControllerNode's)."""
    declare = node.declare_parameter
    declare("checkpoint", "")
    for f in inference_fields():
        declare(meta_name(f), f.default, ParameterDescriptor(
            description=f.metadata["help"], additional_constraints=describe_range(f)))
    declare("publish_attention", True)
    declare("front_topic", "camera/front/image_raw")
    declare("wrist_topic", "camera/wrist/image_raw")
    # Configure and activate at start-up (`ros2 run`, launch, a respawn); false: wait,
    # unconfigured, for `ros2 lifecycle set`.
    declare("autostart", True)
    # Wall seconds without a camera image, while joint states arrive, before the camera
    # subscriptions are made again (arm_act/nodes/silent_inputs.py); 0: never.
    declare("image_timeout", 5.0)
    # SCHED_FIFO priority of the control tick (the executor thread; ros2_control's
    # thread_priority, 0: normal), and of the inference thread (0: normal; else below the tick's).
    declare("thread_priority", realtime.DEFAULT_THREAD_PRIORITY,
            thread_priority_descriptor("the control tick (the executor thread)"))
    declare("inference_thread_priority", AUTOMATIC_PRIORITY,
            thread_priority_descriptor("the inference thread, below thread_priority; -1: thread_priority - 10",
                                       automatic=True))
    declare("lock_memory", realtime.DEFAULT_LOCK_MEMORY, lock_memory_descriptor())


def read_scheduling(node, realtime_mode: bool) -> tuple[int, int]:
    """(control tick priority, inference thread priority), fixed at start; locks the process's
    memory when asked in realtime; ValueError for a start-up value out of its range."""
    thread_priority = read_priority(node)
    inference_priority = read_priority(node, "inference_thread_priority",
                                       automatic=inference_priority_for(thread_priority))
    if inference_priority and inference_priority >= thread_priority:
        raise ValueError(f"inference_thread_priority {inference_priority} must be 0 or below "
                         f"thread_priority {thread_priority}: the control tick preempts inference")
    thread_priority, inference_priority = normal_when_unpaced(node, realtime_mode, thread_priority,
                                                              inference_priority)
    if realtime_mode and node.get_parameter("lock_memory").value:
        realtime.lock_process_memory(node.get_logger())  # before the model loads (MCL_FUTURE takes it too)
    for name in LIVE_PARAMETERS:
        reason = check_live_value(name, node.get_parameter(name).value)
        if reason:
            raise ValueError(reason)
    return thread_priority, inference_priority


def load_policy(node, runtime: PolicyRuntime | None, camera_topics) -> tuple[PolicyRuntime, ActionSelector]:
    """At configure: the runtime (`runtime` when given, else the checkpoint's) and its selector,
    from the node's configure-time parameters; an exception says why the checkpoint cannot be
    used (a backend not known, a device not there, cameras not the node's)."""

    def p(name):
        return node.get_parameter(name).value

    control_rate = node.control_rate
    if runtime is not None:  # its ensembling counts this node's ticks
        runtime.set_control_rate(control_rate)
    else:
        checkpoint = p("checkpoint") or str(default_checkpoint())
        if p("backend") not in BACKENDS:
            raise ValueError(f"backend={p('backend')!r} must be one of {list(BACKENDS)}")
        runtime = PolicyRuntime.from_checkpoint(
            Path(checkpoint), execution=str(p("execution")), m=float(p("ensemble_m")),
            threads=int(p("torch_threads")), backend=str(p("backend")), device=str(p("device")),
            control_rate=control_rate, colour_balance=bool(p("assist")),
            m_after_change=float(p("ensemble_m_after_change")),
            after_change_s=float(p("ensemble_after_change_s")), gripper=str(p("gripper")),
        )
        node.get_logger().info(f"loaded {checkpoint} ({runtime.execution}, {runtime.backend} "
                               f"backend{': ' + runtime.backend_note if runtime.backend_note else ''})")
    cameras = tuple(runtime.config.cameras)
    if set(cameras) != set(camera_topics):
        raise ValueError(f"the checkpoint's cameras {list(cameras)} are not this node's "
                         f"{list(camera_topics)}")
    # Lockstep: a chunk from the camera pair of tick c is used from tick c+latency_ticks,
    # the rule in-process evaluation uses (the same ActionSelector), so both give the
    # same episodes. Realtime: a chunk is used as soon as its inference finishes.
    aim = panda_aim(control_rate, int(p("regrasps")), str(p("regrasp_retry"))) if bool(p("assist")) else None
    selector = ActionSelector(runtime, int(p("latency_ticks")),
                              CommandLimiter(float(p("max_joint_speed")), control_rate), aim=aim)
    if bool(p("publish_attention")) and getattr(runtime, "backend", "torch") != "torch":
        node.get_logger().warning("publish_attention runs every inference on torch (the exported "
                                  "graph has no attention output); set it false to use the "
                                  f"{runtime.backend} backend")
    return runtime, selector


def on_set_parameters(node, parameters) -> SetParametersResult:
    """The node's parameter callback for `ros2 param set`: live parameters take effect now,
    configure-time ones only while unconfigured, fixed ones never; the reason of a refusal
    comes back to the caller."""
    for param in parameters:
        reason = refusal(param.name, param.value, node.lifecycle_state)
        if reason:
            return SetParametersResult(successful=False, reason=reason)
    values = {p.name: p.value for p in parameters}
    with node.lock:
        apply_live(node, values)
    for name in values:
        if name in LIVE_PARAMETERS:
            node.get_logger().info(f"{name} = {values[name]!r} from now on")
    return SetParametersResult(successful=True)


def apply_live(node, values: dict) -> None:
    """Apply accepted live values (name -> value) to the node's running policy (lock held). A
    change of execution or ensemble_m gives a fresh chunk executor: the old one's chunks are
    dropped and the selector holds the last command until the next camera pair's chunk."""
    runtime, selector, rate = node.runtime, node.selector, node.control_rate
    if runtime is not None and ("execution" in values or "ensemble_m" in values):
        execution = values.get("execution", node.get_parameter("execution").value)
        m = float(values.get("ensemble_m", node.get_parameter("ensemble_m").value))
        runtime.executor = make_executor(execution, runtime.config, m, rate)
        runtime.execution, runtime.m = execution, m
    if runtime is not None and "ensemble_m_after_change" in values:  # from the next goal change on
        runtime.m_after_change = float(values["ensemble_m_after_change"])
    if runtime is not None and "ensemble_after_change_s" in values:
        runtime.after_change_s = float(values["ensemble_after_change_s"])
    if runtime is not None and "gripper" in values:
        runtime.gripper = str(values["gripper"])
    if "stale_timeout" in values:
        node.stale_timeout_ns = int(values["stale_timeout"] * 1e9)
    if "max_joint_speed" in values and selector is not None:
        selector.limiter.max_step = values["max_joint_speed"] / rate
