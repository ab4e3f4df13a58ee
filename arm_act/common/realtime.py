"""Process and thread settings for the nodes on the live loop (sim_node, policy_node as executables).

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
- Real-time scheduling of the deadline threads, as ros2_control's controller_manager does for
  its update loop (its `thread_priority` parameter, default 50): set_thread_priority() puts the
  CALLING thread on SCHED_FIFO at a priority 1..99 (0: the normal scheduler, SCHED_OTHER), so
  it preempts every normal thread of the machine the moment its deadline wakes it, instead of
  waiting for CFS to give it a turn. Without the privilege (an unprivileged container, a user
  without an rtprio limit) the call fails with EPERM: the result says why, the node logs one
  warning and carries on on the normal scheduler. Linux's RT throttling
  (/proc/sys/kernel/sched_rt_runtime_us, 95 % by default) keeps a runaway RT thread from
  freezing the machine. lock_memory() is realtime_tools' lock_memory, mlockall(MCL_CURRENT |
  MCL_FUTURE), with MCL_ONFAULT: no page the process has touched is paged out and faulted
  back in on a deadline, and pages it never touches (most of libtorch, say) are not read in
  just to be pinned. It refuses, with a reason, where RLIMIT_MEMLOCK is finite and the
  process lacks CAP_IPC_LOCK: every later mapping counts against that limit, and an
  allocation past it would fail in the middle of a run.

  A Python caveat: an RT thread that needs the GIL while another thread of the same process
  holds it waits for that thread (a priority inversion), about one switch interval (0.5 ms,
  above) while the holder runs Python code, but as long as the holder waits for a core when
  it is a normal thread taken off the core by other work (tens of ms on a loaded machine). So
  the nodes put every thread that takes the GIL on SCHED_FIFO, the deadline thread highest,
  and the DDS reception threads that feed the tick at its priority
  (set_reception_threads_priority; docs/architecture.md, "Threading", has the measurements).

  Threads inherit their creator's scheduling (glibc's pthread_create default), so a thread
  started by an RT thread is RT too unless it says otherwise: policy_node's inference worker
  sets its own scheduling when it starts (set_thread_priority(0) moves it back to SCHED_OTHER).

arm_act.ros.node_main.spin_node (the executables' main, as launch and `ros2 run` start them)
calls enable() for a node class with `realtime_process = True`; tests construct nodes in the
pytest process, which stays as it is: settle() and realtime_thread() do nothing where enable()
was not called. ARM_ACT_REALTIME_TUNING=0 in the environment turns all of it off (for
side-by-side benchmarks).
"""
from __future__ import annotations

import ctypes
import dataclasses
import gc
import os
import sys
import threading
import time
from pathlib import Path

SWITCH_INTERVAL_S = 0.0005
DEFAULT_THREAD_PRIORITY = 50  # ros2_control's controller_manager thread_priority default
DEFAULT_LOCK_MEMORY = True  # the nodes' lock_memory parameter (docs/architecture.md, "Late ticks and the host")
MCL_CURRENT, MCL_FUTURE, MCL_ONFAULT = 1, 2, 4  # <sys/mman.h>
CAP_IPC_LOCK = 14  # <linux/capability.h>
_enabled = False
_settled = False
_warned = False
_memory_locked = False


def tuning_disabled() -> bool:
    """ARM_ACT_REALTIME_TUNING=0: none of this module's settings (benchmarks compare side by side)."""
    return os.environ.get("ARM_ACT_REALTIME_TUNING", "1") == "0"


def enable() -> None:
    """Apply the settings to this process (ARM_ACT_REALTIME_TUNING=0 in the environment: do
    nothing, for side-by-side benchmarks: benchmarks/run_realtime.sh)."""
    global _enabled
    if tuning_disabled():
        return
    _enabled = True
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def enabled() -> bool:
    return _enabled


def name_os_thread(name: str) -> None:
    """Give the calling thread its OS name (Linux: /proc/<pid>/task/<tid>/comm, top -H), so the
    benchmark's CPU per thread names it; Python 3.11 leaves every thread "python"."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def settle() -> None:
    """Freeze the heap as it is (once per process, only after enable()), and from then on time
    every garbage collection (gc_pauses)."""
    global _settled
    if not _enabled or _settled:
        return
    _settled = True
    gc.collect()
    gc.freeze()
    gc.callbacks.append(_time_collection)


_gc_pauses = {"count": 0, "total_ms": 0.0, "max_ms": 0.0, "full": 0, "full_max_ms": 0.0}
_gc_started: float | None = None


def _time_collection(phase: str, info: dict) -> None:
    global _gc_started
    if phase == "start":
        _gc_started = time.perf_counter()
    elif _gc_started is not None:
        ms = (time.perf_counter() - _gc_started) * 1e3
        _gc_started = None
        _gc_pauses["count"] += 1
        _gc_pauses["total_ms"] += ms
        _gc_pauses["max_ms"] = max(_gc_pauses["max_ms"], ms)
        if info.get("generation") == 2:  # a full collection: every object not frozen
            _gc_pauses["full"] += 1
            _gc_pauses["full_max_ms"] = max(_gc_pauses["full_max_ms"], ms)


def gc_pauses() -> dict[str, float]:
    """The garbage collections since settle(): how many, their total and the longest (ms), and
    of them the full ones (generation 2); a collection stops every thread of the process that
    needs the GIL, the deadline thread too. The nodes publish them in their diagnostics
    (gc_pauses, gc_max_ms, gc_full, gc_full_max_ms)."""
    return dict(_gc_pauses)


# ---------------------------------------------------------------- real-time scheduling
def priority_range() -> tuple[int, int]:
    """SCHED_FIFO's priorities on this system (Linux: 1 .. 99)."""
    return os.sched_get_priority_min(os.SCHED_FIFO), os.sched_get_priority_max(os.SCHED_FIFO)


def check_priority(priority, name: str = "thread_priority") -> str | None:
    """The reason `priority` is refused, or None: 0 (the normal scheduler) or SCHED_FIFO's range."""
    low, high = priority_range()
    if isinstance(priority, bool) or not isinstance(priority, int) or not (priority == 0 or low <= priority <= high):
        return (f"{name} must be 0 (the normal scheduler) or a SCHED_FIFO priority in {low} .. {high}, "
                f"not {priority!r}")
    return None


@dataclasses.dataclass(frozen=True)
class Scheduling:
    """What set_thread_priority did to one thread: asked for `requested`, it is on `policy`
    (SCHED_FIFO or SCHED_OTHER) at `priority` (0 on SCHED_OTHER); `reason` says why it is not
    on SCHED_FIFO when that was asked for."""

    requested: int
    policy: str
    priority: int
    tid: int
    reason: str = ""

    @property
    def fifo(self) -> bool:
        return self.policy == "SCHED_FIFO"

    @property
    def ok(self) -> bool:
        return not self.reason

    def describe(self, what: str) -> str:
        if self.fifo:
            return f"{what} on SCHED_FIFO priority {self.priority}"
        if self.requested == 0:
            return f"{what} on the normal scheduler (SCHED_OTHER)"
        return f"{what} stays on the normal scheduler (SCHED_OTHER): {self.reason}"


_POLICY_NAMES = {getattr(os, n): n for n in ("SCHED_OTHER", "SCHED_FIFO", "SCHED_RR", "SCHED_BATCH",
                                             "SCHED_IDLE") if hasattr(os, n)}


def thread_scheduling(tid: int) -> tuple[str, int]:
    """(policy name, RT priority) of a thread of this machine by its native id."""
    policy = os.sched_getscheduler(tid)
    return _POLICY_NAMES.get(policy, str(policy)), os.sched_getparam(tid).sched_priority


def _privilege_hint() -> str:
    return ("not permitted: run as root, in docker with --cap-add SYS_NICE, or give the user an "
            "rtprio limit (ulimit -r / limits.conf); see docs/ros.md")


def set_thread_priority(priority: int) -> Scheduling:
    """Put the calling thread on SCHED_FIFO at `priority` (1 .. 99), or with 0 on the normal
    scheduler (back from an RT scheduling it inherited). Raises ValueError for a priority out
    of range; a refusal by the system (EPERM, ...) is not an error: the returned Scheduling
    says why and the thread stays where it was."""
    reason = check_priority(priority, "priority")
    if reason:
        raise ValueError(reason)
    tid = threading.get_native_id()
    failure = ""
    try:
        if priority == 0:
            if os.sched_getscheduler(0) != os.SCHED_OTHER:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        else:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError as exc:
        failure = f"{_privilege_hint()} ({exc.strerror or exc})"
    except OSError as exc:
        failure = f"sched_setscheduler failed: {exc.strerror or exc}"
    policy, now = thread_scheduling(0)
    return Scheduling(requested=priority, policy=policy, priority=now, tid=tid, reason=failure)


def memlock_refusal(limit: int | None = None, cap_eff: int | None = None) -> str:
    """Why this process must not lock its future mappings ("" when it may): RLIMIT_MEMLOCK
    (`limit`, bytes; default this process's soft limit) is finite and CAP_IPC_LOCK is not in
    its effective capabilities (`cap_eff`, the CapEff mask; default /proc/self/status's), so
    once the locked mappings reach the limit every further mmap (a new thread's stack, a grown
    heap) would fail."""
    import resource
    if limit is None:
        limit = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    if limit == resource.RLIM_INFINITY:
        return ""
    if cap_eff is None:
        cap_eff = 0
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("CapEff:"):
                    cap_eff = int(line.split()[1], 16)
        except (OSError, ValueError, IndexError):
            pass
    if cap_eff >> CAP_IPC_LOCK & 1:
        return ""
    return (f"the memlock limit is {limit / 2**20:g} MiB and the process lacks CAP_IPC_LOCK, so locking "
            f"every future mapping would make allocations fail past it (ulimit -l unlimited / limits.conf "
            f"memlock unlimited, or --cap-add IPC_LOCK)")


def lock_memory() -> tuple[bool, str]:
    """mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) for this process: (True, "") or (False,
    why not). Every page the process has mapped and touched, and every page it touches later,
    stays in RAM (thread stacks included); pages it never touches are not read in. Refused,
    with memlock_refusal()'s reason, where the memlock limit is finite and unprivileged.
    Kernels before 4.4 lack MCL_ONFAULT (EINVAL): there it locks everything mapped, as
    realtime_tools does."""
    why = memlock_refusal()
    if why:
        return False, why
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        if libc.mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) == 0:
            return True, ""
        err = ctypes.get_errno()
        if err == 22 and libc.mlockall(MCL_CURRENT | MCL_FUTURE) == 0:  # EINVAL: no MCL_ONFAULT
            return True, ""
        err = ctypes.get_errno()
    except (OSError, AttributeError) as exc:
        return False, f"mlockall unavailable: {exc}"
    hint = " (raise ulimit -l / limits.conf memlock, or --cap-add IPC_LOCK)" if err in (1, 12) else ""
    return False, f"mlockall failed: {os.strerror(err)}{hint}"


def lock_process_memory(logger=None) -> bool | None:
    """For the nodes' `lock_memory` parameter, where enable() ran (the executables; None
    elsewhere): lock_memory() once per process, one info line when it worked, one warning
    saying why when the system refuses (the node carries on with its memory unlocked)."""
    global _memory_locked
    if not _enabled:
        return None
    if not _memory_locked:
        ok, why = lock_memory()
        _memory_locked = ok
        if logger is not None:
            if ok:
                logger.info("process memory locked (mlockall MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)")
            else:
                logger.warning(f"lock_memory: {why}; the process carries on with its memory unlocked")
    return _memory_locked


def memory_locked() -> bool:
    return _memory_locked


def realtime_thread(priority: int, what: str, logger=None, reception_threads: bool = False) -> Scheduling | None:
    """For the nodes' deadline threads, called on the thread itself: set_thread_priority
    where enable() ran (the executables), nothing elsewhere (None). reception_threads: the
    process's DDS reception threads go to the same priority when this thread got it. With a
    logger (a ROS logger or logging.Logger): one info line saying what the thread got, or one
    warning per process when the system refuses (later refusals: info)."""
    global _warned
    if not _enabled:
        return None
    result = set_thread_priority(priority)
    if reception_threads and result.fifo:
        changed = set_reception_threads_priority(priority)
        if logger is not None:
            logger.info(f"DDS reception threads on SCHED_FIFO priority {priority}: {', '.join(changed)}")
    if logger is not None:
        line = result.describe(what)
        if result.ok:
            logger.info(line)
        elif not _warned:
            _warned = True
            logger.warning(line)
        else:
            logger.info(line)
    return result


# Fast DDS's reception threads (one per transport and port: "dds.shm.7411", "dds.udp.7410"): a
# deadline tick driven by a message (policy_node's by /clock and the joint state) waits for the
# thread that receives that message before its own thread wakes. Not the watchdog.
DDS_RECEPTION_PREFIXES = ("dds.shm.", "dds.udp.")
DDS_EXCLUDED = ("dds.shm.wdog",)


def set_reception_threads_priority(priority: int) -> dict[str, int]:
    """Put this process's DDS reception threads on SCHED_FIFO at `priority` (0: SCHED_OTHER).
    Returns {"comm[tid]": priority now} for every thread it changed; threads the system
    refuses stay as they are (the deadline thread's own call reports why)."""
    reason = check_priority(priority, "priority")
    if reason:
        raise ValueError(reason)
    changed = {}
    try:
        tasks = list(os.scandir("/proc/self/task"))
    except OSError:
        return changed
    for task in tasks:
        try:
            with open(f"{task.path}/comm") as f:
                comm = f.read().strip()
            if not comm.startswith(DDS_RECEPTION_PREFIXES) or comm in DDS_EXCLUDED:
                continue
            tid = int(task.name)
            if priority:
                os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
            else:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            changed[f"{comm}[{tid}]"] = os.sched_getparam(tid).sched_priority
        except (OSError, ValueError):
            continue
    return changed
