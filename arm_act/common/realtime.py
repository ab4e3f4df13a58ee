"""Process settings for the nodes on the live loop (sim_node, policy_node as executables).

- The GIL switch interval: 0.5 ms instead of Python's 5 ms. A thread woken for a deadline (the
  sim loop at its tick; the executor thread of policy_node for /clock and the joint state)
  waits for the GIL until the running thread lets go, up to a whole switch interval when that
  thread is in Python code (the inference worker's pre- and post-processing, the executor's
  callbacks): 5 ms of a 20 ms control period.
- The heap, frozen once the node is ready (gc.freeze after a last full collection): a full
  (generation 2) collection walks every object of the process, and with torch, onnxruntime,
  PyBullet and rclpy loaded that is ~200 000 objects and 80-250 ms (measured here), several
  control ticks in one stall; frozen objects are never walked again, so later collections see
  only what the loop itself allocates.

arm_act.ros.node_main.spin_node (the executables' main, as launch and `ros2 run` start them)
calls enable() for a node class with `realtime_process = True`; tests construct nodes in the
pytest process, which stays as it is: settle() does nothing where enable() was not called.
"""
from __future__ import annotations

import gc
import os
import sys

SWITCH_INTERVAL_S = 0.0005
_enabled = False
_settled = False


def enable() -> None:
    """Apply the settings to this process (ARM_ACT_REALTIME_TUNING=0 in the environment: do
    nothing, for side-by-side benchmarks: benchmarks/run_realtime.sh)."""
    global _enabled
    if os.environ.get("ARM_ACT_REALTIME_TUNING", "1") == "0":
        return
    _enabled = True
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def name_os_thread(name: str) -> None:
    """Give the calling thread its OS name (Linux: /proc/<pid>/task/<tid>/comm, top -H), so the
    benchmark's CPU per thread names it; Python 3.11 leaves every thread "python"."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def settle() -> None:
    """Freeze the heap as it is (once per process, only after enable())."""
    global _settled
    if not _enabled or _settled:
        return
    _settled = True
    gc.collect()
    gc.freeze()
