"""The console-script main shared by the node executables (`ros2 run arm_act <node>`, launch).

What every node gets from here, so `ros2 run` with no arguments just works and any number of
signals stops it cleanly:

- **Sim time by default.** `use_sim_time:=true` is put in front of the command line's own
  arguments, so a later `-p use_sim_time:=false` or a parameter file still wins (rcl applies
  parameter rules in the order they appear).
- **Discovery on this machine only by default.** ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
  unless the environment sets it: a demo never talks to a neighbour's robot.
- **A node killed with SIGKILL can be started again.** Before DDS starts, the shared-memory
  files that dead Fast DDS processes left behind are removed (arm_act/ros/shm.py), so a new
  participant does not pick up a dead one's port.
- **Clean shutdown whatever the signals.** rclpy's own handlers raise KeyboardInterrupt
  wherever the main thread happens to be; a second SIGINT (launch forwards one, and the
  terminal delivers another to the whole process group) then lands inside destroy_node()
  and the process dies with -2 and a traceback. Ours only set a flag: the first SIGINT or
  SIGTERM ends the spin between callbacks, later ones are noted and ignored, and then the
  node is destroyed (its threads joined before any of its publishers go away) and the
  context shut down. Exit status 0.
- **An end.** A node that finishes its work (sim_node after its episodes) sets a `done`
  event; the process then exits 0, which a launch file's OnProcessExit can act on. A node
  that failed sets `failed` and the process exits 1.

Single-threaded on purpose: every callback of our nodes is short (the heavy work, physics
and inference, runs on the nodes' own threads), and rclpy's MultiThreadedExecutor costs so
much per callback that beside a 100 Hz /clock and joint_states the policy node missed 419 of
629 control ticks in 12 s; the SingleThreadedExecutor missed none (docs/architecture.md, "Threading").

rclpy's EventsExecutor (rclpy.experimental) by default: also one thread, but it waits and
dispatches in C++ instead of rebuilding a wait set in Python on every wake-up. Beside the
100 Hz /clock and joint_states that Python was most of the nodes' executor threads: on a
2-core AMD EPYC (AVX2), 60 s of `arm-act bench --ros-only --camera-rate 10`, policy_node's
executor thread went from 0.36-0.38 to 0.15 CPU s per sim second and sim_node's from 0.20-0.21
to 0.06, three interleaved runs each (docs/architecture.md, "The events executor").
ARM_ACT_EXECUTOR=single in the environment puts the
SingleThreadedExecutor back.

The EventsExecutor of these rclpy builds cannot call a subscription callback that takes
`(msg, info)` (the MessageInfo with the DDS timestamps): its spin raises "SystemError: null
argument to internal routine" and the callback never runs. None of the nodes run here needs
one; a node that does is refused before it spins, in one line that names its topics and
says ARM_ACT_EXECUTOR=single (refuse_message_info_callbacks). bag_recorder and the bench
probe, which stamp messages with the DDS source timestamps, spin on the
SingleThreadedExecutor for that reason.
"""
from __future__ import annotations

import inspect
import os
import signal
import sys
import threading

# rclpy is imported inside the functions: the console scripts install the stop signals
# before anything heavy is imported (a SIGINT during `import rclpy` or torch was swallowed by
# some import and ignored: the node then started as if nothing had happened).

# How often the spin loop looks at the stop flag: Python runs a signal handler only between
# bytecodes of the main thread, so the executor's wait must come back now and then.
POLL_S = 0.1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def sim_time_default(argv: list[str]) -> list[str]:
    """argv with `--ros-args -p use_sim_time:=true --` before the user's arguments: sim time
    unless the command line (a later -p or --params-file) says otherwise."""
    argv = list(argv)
    return argv[:1] + ["--ros-args", "-p", "use_sim_time:=true", "--"] + argv[1:]


class StopSignals:
    """SIGINT/SIGTERM set `event` (the first one) and are counted; the previous handlers come
    back on restore(). Only the main thread can install handlers: elsewhere this is inert."""

    def __init__(self):
        self.event = threading.Event()
        self.received: list[int] = []
        self._previous: dict[int, object] = {}

    def install(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        return self

    def _handle(self, signum, frame) -> None:
        self.received.append(signum)
        self.event.set()

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


def _done(node) -> bool:
    done = getattr(node, "done", None)
    return bool(done is not None and done.is_set())


def dds_defaults() -> None:
    """Before rclpy.init: discovery on this machine unless the environment says otherwise, over
    UDP rather than shared memory (arm_act/ros/transport.py), and no stale shared-memory files
    of dead Fast DDS processes. ValueError for an ARM_ACT_DDS_TRANSPORT it does not know."""
    from arm_act.ros.shm import clean_stale_shm
    from arm_act.ros.transport import apply_transport

    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    apply_transport()
    removed = clean_stale_shm()
    if removed:
        print(f"removed {removed} stale Fast DDS shared-memory files of processes that died", file=sys.stderr)


def run_node(node_class, args=None, use_sim_time: bool = True, restore_signals: bool = True,
             signals: StopSignals | None = None, realtime_process: bool = False) -> int:
    """Create `node_class()`, spin it until a signal, its `done` event or a context shutdown,
    destroy it and shut rclpy down. Returns the exit status (0, or 1 when the node failed or
    could not be created; the reason is one line on stderr, not a traceback).

    `node_class` may also be a function that imports and returns the class (a NodeLoader):
    the DDS participant then starts before that import (`early_participant`), so discovery
    with the running nodes goes on while torch and PyBullet load. realtime_process=True
    applies arm_act/common/realtime.py's settings when the class asks for them.

    restore_signals=False keeps our handlers installed afterwards: a process about to exit
    must not get Python's KeyboardInterrupt back for a signal still on its way (the second
    SIGINT of a process group arrives a moment after the first)."""
    try:
        dds_defaults()
    except ValueError as exc:  # e.g. ARM_ACT_DDS_TRANSPORT=tcp: one line, not a traceback
        print(f"{node_class.__name__}: {exc}", file=sys.stderr)
        return 1
    if signals is None:
        signals = StopSignals().install()  # before init: a signal during start-up is not lost
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.signals import SignalHandlerOptions

    argv = list(sys.argv if args is None else args)
    if use_sim_time:
        argv = sim_time_default(argv)
    node = None
    status = 0
    try:
        rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
        early = None
        if not isinstance(node_class, type):
            early = early_participant()
            node_class = node_class()
        if realtime_process and getattr(node_class, "realtime_process", False):
            from arm_act.common import realtime

            realtime.enable()
        if not signals.event.is_set():
            node = node_class()
        if early is not None:
            early.destroy_node()  # the participant stays: `node` holds it now
        if node is not None:
            executor = make_executor()
            refuse_message_info_callbacks(executor, node)
            executor.add_node(node)
            while not signals.event.is_set() and not _done(node) and rclpy.ok():
                executor.spin_once(timeout_sec=POLL_S)
            executor.remove_node(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as exc:  # noqa: BLE001 - e.g. a missing checkpoint: one line, not a traceback
        print(f"{node_class.__name__}: {exc}", file=sys.stderr)
        status = 1
    finally:
        try:
            if node is not None:
                status = status or int(bool(getattr(node, "failed", False)))
                node.destroy_node()
        except Exception as exc:  # noqa: BLE001 - a node's own teardown error: one line, exit 1
            print(f"{node_class.__name__}: while stopping: {exc}", file=sys.stderr)
            status = status or 1
        finally:
            # Not rclpy's uninstall of its signal handlers, which try_shutdown runs by default:
            # none were installed (SignalHandlerOptions.NO), and the uninstall sets SIGINT to
            # SIG_DFL for an instant before it puts back the handler it finds there, so a second
            # SIGINT in that instant killed the process (-2).
            rclpy.try_shutdown(uninstall_handlers=False)
            if restore_signals:
                signals.restore()
    return status


EARLY_NODE = "_arm_act_starting"


def early_participant():
    """A hidden node with no topics or services of its own, made only so the context's DDS
    participant exists now. rmw creates the participant with a context's first node; the
    executables make this one before importing the node's module (seconds of torch and
    PyBullet), so the running nodes discover this process meanwhile and the real node's
    topics match as soon as it creates them. It ignores the command line's remappings (a
    launch file's `__node:=` is for the real node) and is destroyed once the real node exists."""
    import rclpy

    return rclpy.create_node(EARLY_NODE, use_global_arguments=False, enable_rosout=False,
                             start_parameter_services=False, parameter_overrides=[])


EXECUTOR_ENV = "ARM_ACT_EXECUTOR"
EXECUTORS = ("events", "single")


def make_executor(context=None):
    """The executor the node executables spin on: rclpy's EventsExecutor, or with
    ARM_ACT_EXECUTOR=single the SingleThreadedExecutor (module docstring)."""
    choice = os.environ.get(EXECUTOR_ENV, "events").strip().lower() or "events"
    if choice not in EXECUTORS:
        raise ValueError(f"{EXECUTOR_ENV}={choice!r} must be one of {', '.join(EXECUTORS)}")
    if choice == "single":
        from rclpy.executors import SingleThreadedExecutor

        return SingleThreadedExecutor(context=context)
    from rclpy.experimental import EventsExecutor

    return EventsExecutor(context=context)


def takes_message_info(callback) -> bool:
    """Whether rclpy calls `callback` with (msg, info): it takes two arguments, not one (the
    rule rclpy's Subscription applies when the callback is set)."""
    try:
        inspect.signature(callback).bind(object())
        return False
    except TypeError:
        pass
    try:
        inspect.signature(callback).bind(object(), object())
        return True
    except TypeError:
        return False


def refuse_message_info_callbacks(executor, node) -> None:
    """Raise ValueError, naming the topics, when `executor` is an EventsExecutor and `node` has
    a subscription whose callback takes (msg, info), which that executor cannot call (module
    docstring). Any other executor: nothing."""
    if type(executor).__name__ != "EventsExecutor":
        return
    topics = sorted(sub.topic_name for sub in node.subscriptions if takes_message_info(sub.callback))
    if topics:
        raise ValueError(f"the subscriptions to {', '.join(topics)} take (msg, info), which rclpy's "
                         f"EventsExecutor cannot call; start the node with {EXECUTOR_ENV}=single")


def ignore_stop_signals() -> None:
    """For a process on its way out: ignore SIGINT/SIGTERM from here on. Python's finalization
    puts a Python-level handler back to SIG_DFL (an ignored signal stays ignored), and a second
    SIGINT arriving while torch and PyBullet unload would then kill the process (-2)."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def spin_node(node_class, args=None, use_sim_time: bool = True, signals: StopSignals | None = None) -> None:
    """The console-script main: run_node (a class, or a NodeLoader), then exit with its status."""
    status = run_node(node_class, args, use_sim_time=use_sim_time, restore_signals=False, signals=signals,
                      realtime_process=True)
    ignore_stop_signals()
    # Everything is closed and joined by now (the node is destroyed, rclpy shut down). Skip the
    # interpreter's own teardown: unloading torch and PyBullet took 0.8 s on a quiet machine and
    # over launch's 5 s SIGINT grace on a loaded one (launch then escalates to SIGTERM).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)

