"""The `thread_priority` parameter of the nodes with a deadline thread (sim_node's sim_loop,
the control tick of policy_node and expert_node on their executor thread), as ros2_control's
controller_manager has it: an int, default 50, 0 for the normal scheduler; fixed at start.
What it does is arm_act/common/realtime.py's (SCHED_FIFO for the calling thread, a warning
and the normal scheduler where the system does not permit it)."""
from __future__ import annotations

from rcl_interfaces.msg import IntegerRange, ParameterDescriptor

from arm_act.common import realtime

AUTOMATIC_PRIORITY = -1  # inference_thread_priority: derived from thread_priority
INFERENCE_BELOW = 10


def inference_priority_for(thread_priority: int) -> int:
    """The automatic inference priority: 10 below the tick's (at least 1), 0 when the tick is normal."""
    if thread_priority <= 1:
        return 0
    return max(1, thread_priority - INFERENCE_BELOW)


def thread_priority_descriptor(what: str, automatic: bool = False) -> ParameterDescriptor:
    low, high = realtime.priority_range()
    return ParameterDescriptor(
        description=f"SCHED_FIFO priority of {what} ({low} .. {high}); 0: the normal scheduler. "
                    "Fixed at start; needs root, CAP_SYS_NICE or an rtprio limit, else a warning",
        read_only=True,
        integer_range=[IntegerRange(from_value=AUTOMATIC_PRIORITY if automatic else 0, to_value=high, step=1)])


def gc_values() -> dict[str, str]:
    """The process's garbage collections since it settled, for a node's diagnostics (all "0"
    where realtime.settle() did not run: tests composing nodes in one process)."""
    pauses = realtime.gc_pauses()
    return {"gc_pauses": str(pauses["count"]), "gc_max_ms": f"{pauses['max_ms']:.3f}",
            "gc_full": str(pauses["full"]), "gc_full_max_ms": f"{pauses['full_max_ms']:.3f}"}


def lock_memory_descriptor() -> ParameterDescriptor:
    return ParameterDescriptor(
        description="Lock the process's memory in RAM at start (mlockall with MCL_ONFAULT, as ros2_control_node's "
                    "lock_memory), so the kernel's reclaim never takes a page the deadline thread then faults "
                    "back in. Realtime only; fixed at start; needs root, CAP_IPC_LOCK or an unlimited memlock "
                    "limit, else one warning and the process runs unlocked",
        read_only=True)


def read_priority(node, name: str = "thread_priority", automatic: int | None = None) -> int:
    """The declared parameter's value, checked (ValueError with the reason); -1 is `automatic`
    where one is given."""
    value = node.get_parameter(name).value
    if automatic is not None and value == AUTOMATIC_PRIORITY:
        return automatic
    reason = realtime.check_priority(value, name)
    if reason:
        raise ValueError(reason)
    return int(value)


def normal_when_unpaced(node, paced: bool, *priorities: int) -> tuple[int, ...]:
    """`priorities`, or all 0 when the node has no wall-clock deadline (lockstep, or sim_node
    with real_time_factor 0). Such a loop runs flat out, not periodically: on SCHED_FIFO it
    would take the cores from every normal process (a bag recorder too) up to RT throttling's
    95 %. Logged once, in the executables (where the priorities would apply)."""
    if paced or not any(priorities) or not realtime.enabled():
        return priorities
    node.get_logger().info("no wall-clock deadline (lockstep or real_time_factor 0): the threads stay on the "
                           "normal scheduler; thread_priority applies in realtime")
    return tuple(0 for _ in priorities)
