"""sim_node: the PyBullet world on ROS 2 topics.

Publishes /clock, joint_states, camera/<name>/image_raw + camera_info, task, episode and
objects; applies arm_controller/commands and gripper_controller/commands the way
forward_command_controller does (wrong length or non-finite values are rejected with a
logged reason and the last valid target is held).

Modes (docs/architecture.md, "Modes"): ``realtime`` paces physics to the wall clock (or runs as fast as
rendering allows with real_time_factor 0), always publishing /clock; ``lockstep`` advances one
control period only after the command for the current tick has arrived, so the same seed
gives the same trajectory bit for bit.

The physics runs in its own thread, not in an executor callback: a physics step plus two
renders takes tens of milliseconds, and the command subscriptions and services must stay
responsive meanwhile. Sim time is continuous across episodes (/clock never jumps back).
"""
from __future__ import annotations

import dataclasses
import json
import threading
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock as RosClock
from rclpy.clock import ClockType
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import Trigger
from visualization_msgs.msg import MarkerArray

from arm_act.common import realtime
from arm_act.common.episodes import EpisodeSchedule, parse_blocks
from arm_act.nodes.guard import guard_time_source, guarded, rejections
from arm_act.nodes.loop_timing import LoopTiming
from arm_act.nodes.readiness import ControllerReadiness
from arm_act.nodes.scheduling import (
    gc_values,
    lock_memory_descriptor,
    normal_when_unpaced,
    read_priority,
    thread_priority_descriptor,
)
from arm_act.ros import conversions as conv
from arm_act.ros.conversions import CLOCK_START
from arm_act.ros.qos import TRANSIENT_LOCAL
from arm_act.sim import ArmEnv, SimConfig
from arm_act.sim.perturb import perturbation

# Wall seconds between "waiting for ..." log lines while the first episode cannot start.
WAIT_REPORT_S = 3.0
# Realtime: a loop further behind the wall clock than this (paused, or stalled) continues from
# now instead of racing to catch up.
MAX_LAG_S = 0.25
# Realtime: a publication reached more than this share of a control period after its stamp's
# time is an overrun: the loop continues on a new reference from it, skipping the wall time
# lost, as ros2_control_node skips the cycles an overrun missed. Catching up instead published
# the next ticks in a burst, sooner after the late one than the controllers answer a tick (a
# 30 ms stop of the whole machine left a control period without a command at sim_node).
OVERRUN_PERIODS = 0.5


def env_config_for_rates(control_rate: int, step_rate: int, camera_rate: int) -> SimConfig:
    """The SimConfig whose env.step() lasts one step period (1/step_rate s), with the same
    physics dt as the control-rate config: a lockstep episode over ROS integrates exactly
    as the in-process rollout, and realtime stepping at the joint-state rate changes only
    when states are published, not the physics."""
    base = SimConfig(control_rate_hz=control_rate, camera_rate_hz=camera_rate)
    if step_rate % control_rate or step_rate % camera_rate:
        raise ValueError(f"joint_state_rate={step_rate} must be a multiple of control_rate={control_rate} "
                         f"and camera_rate={camera_rate}")
    config = dataclasses.replace(base, control_rate_hz=step_rate)
    if abs(config.physics_dt - base.physics_dt) > 1e-12:
        raise ValueError(f"joint_state_rate={step_rate}: physics rate {base.physics_rate_hz} Hz does not "
                         f"split into whole steps per joint-state period")
    return config


class SimNode(Node):
    realtime_process = True  # its executable gets arm_act/common/realtime.py's settings

    def __init__(self, **kwargs):
        super().__init__("sim_node", **kwargs)
        guard_time_source(self)  # with use_sim_time set on it, a stray negative /clock must not stop it
        self._declare_parameters()
        self._read_parameters()
        self._create_interfaces()
        self._init_state()
        paced = self.mode == "realtime" and self.real_time_factor > 0
        (self.thread_priority,) = normal_when_unpaced(self, paced, self.thread_priority)
        if paced and self.get_parameter("lock_memory").value:
            realtime.lock_process_memory(self.get_logger())
        self._thread = threading.Thread(target=self._run, name="sim_loop", daemon=True)
        self._thread.start()
        # The executor thread (this one, in the executable) runs the command callbacks, which hold
        # the GIL: preempted by other work while it holds it, it would stall the sim_loop thread.
        # So it is RT too, one below the tick (docs/architecture.md, "Threading").
        realtime.realtime_thread(self.thread_priority - 1 if self.thread_priority > 1 else 0,
                                 "executor thread", self.get_logger())

    def _declare_parameters(self) -> None:
        self.declare_parameter("mode", "realtime")
        self.declare_parameter("real_time_factor", 1.0)
        self.declare_parameter("control_rate", 50)
        self.declare_parameter("joint_state_rate", 100)
        self.declare_parameter("camera_rate", 10)
        self.declare_parameter("seed", 0)
        self.declare_parameter("blocks", "2-5")
        self.declare_parameter("episodes", 0)
        self.declare_parameter("reset_pause", 1.0)
        self.declare_parameter("lockstep_timeout", 10.0)
        self.declare_parameter("gui", False)
        self.declare_parameter("robustness", "")  # a perturbation of arm_act/sim/perturb.py ("" for none)
        self.declare_parameter("episode_time_limit", 20.0)
        # Start the first episode only once a controller that can drive the arm publishes
        # commands: a managed one (policy_node) must be active (nodes/readiness.py), so a policy
        # that takes seconds to load, or waits to be activated by hand, misses no episode.
        self.declare_parameter("wait_for_controller", True)
        # Start the first episode only once the bag recorder (a node of this name, in this
        # namespace) is subscribed to every topic the sim publishes and to the commands, so
        # a recording holds the whole first episode: our writers have matched its readers,
        # and (recorder_reports_matches) its command readers have matched every command
        # writer in the graph, by its report on <recorder_node>/publishers_matched.
        self.declare_parameter("wait_for_recorder", False)
        self.declare_parameter("recorder_node", "bag_recorder")
        # false: a recorder that sends no such report (not arm_act's bag_recorder).
        self.declare_parameter("recorder_reports_matches", True)
        # After the last of `episodes` (> 0) episodes the process exits 0 (launch files end on it).
        self.declare_parameter("exit_when_done", True)
        # SCHED_FIFO priority of the sim_loop thread (ros2_control's thread_priority; 0: normal).
        self.declare_parameter("thread_priority", realtime.DEFAULT_THREAD_PRIORITY,
                               thread_priority_descriptor("the sim_loop thread"))
        self.declare_parameter("lock_memory", realtime.DEFAULT_LOCK_MEMORY, lock_memory_descriptor())

    def _read_parameters(self) -> None:
        """The rates, the episode schedule and the world, from the parameters (fixed at start)."""

        def param(name):
            return self.get_parameter(name).value

        self.thread_priority = read_priority(self)
        self.mode = str(param("mode"))
        if self.mode not in ("realtime", "lockstep"):
            raise ValueError(f"mode={self.mode!r} must be 'realtime' or 'lockstep'")
        self.real_time_factor = float(param("real_time_factor"))
        self.control_rate = int(param("control_rate"))
        self.joint_state_rate = int(param("joint_state_rate"))
        self.camera_rate = int(param("camera_rate"))
        self.reset_pause = float(param("reset_pause"))
        self.lockstep_timeout = float(param("lockstep_timeout"))
        # Lockstep steps the world one control period per command (joint states at the
        # control rate); realtime steps at the joint-state rate and commands are applied at
        # the control rate.
        self.step_rate = self.control_rate if self.mode == "lockstep" else self.joint_state_rate
        try:
            config = env_config_for_rates(self.control_rate, self.step_rate, self.camera_rate)
        except ValueError as exc:
            self.get_logger().warning(f"{exc}; publishing joint states at the control rate")
            self.step_rate = self.control_rate
            config = env_config_for_rates(self.control_rate, self.step_rate, self.camera_rate)
        self.steps_per_command = self.step_rate // self.control_rate
        self.steps_per_frame = self.step_rate // self.camera_rate
        self.schedule = EpisodeSchedule(
            seed=int(param("seed")), blocks=parse_blocks(str(param("blocks"))), episodes=int(param("episodes"))
        )
        config = dataclasses.replace(config, episode_time_limit=float(param("episode_time_limit")))
        robustness = str(param("robustness"))
        self.env = ArmEnv(config, gui=bool(param("gui")), perturbation=perturbation(robustness) if robustness else None)
        self.cameras = [c.name for c in config.cameras]

    def _create_interfaces(self) -> None:
        """Publishers, the command subscriptions, services, diagnostics and the peers the first
        episode waits for (a controller, the recorder)."""
        self._controller_readiness = ControllerReadiness(self, conv.ARM_COMMAND_TOPIC)
        self._recorder_matches: dict[str, int] | None = None  # the recorder's latest report
        self._recorder_matches_topic = self.resolve_topic_name(
            f"{self.get_parameter('recorder_node').value}/{conv.RECORDER_MATCHES_TOPIC}")
        if self.get_parameter("wait_for_recorder").value and self.get_parameter("recorder_reports_matches").value:
            self.create_subscription(String, self._recorder_matches_topic, self._recorder_matches_callback,
                                     TRANSIENT_LOCAL)
        self.clock_pub = self.create_publisher(Clock, "/clock", 10)
        self.joint_pub = self.create_publisher(JointState, "joint_states", 10)
        self.image_pubs = {n: self.create_publisher(Image, f"camera/{n}/image_raw", 10) for n in self.cameras}
        self.info_pubs = {n: self.create_publisher(CameraInfo, f"camera/{n}/camera_info", 10) for n in self.cameras}
        self.task_pub = self.create_publisher(String, "task", TRANSIENT_LOCAL)
        self.episode_pub = self.create_publisher(String, "episode", TRANSIENT_LOCAL)
        self.objects_pub = self.create_publisher(MarkerArray, "objects", 10)
        self.create_subscription(Float64MultiArray, conv.ARM_COMMAND_TOPIC, self.arm_command_callback, 10)
        self.create_subscription(Float64MultiArray, conv.GRIPPER_COMMAND_TOPIC, self.gripper_command_callback, 10)
        self.create_service(Trigger, "~/reset", self.reset_callback)
        self.create_service(Trigger, "~/pause", self.pause_callback)
        self.create_service(Trigger, "~/unpause", self.unpause_callback)
        self.diag_pub = self.create_publisher(DiagnosticArray, "sim/diagnostics", 10)
        self.create_timer(1.0, self.publish_diagnostics, clock=RosClock(clock_type=ClockType.STEADY_TIME))

    def _init_state(self) -> None:
        """The loop's state: command targets and counts, episode bookkeeping, timing records."""
        self._lock = threading.Condition()
        self._arm_target: np.ndarray | None = None
        self._gripper_target: float | None = None
        self._arm_count = 0
        self._gripper_count = 0
        self._tick_counts = (0, 0)  # (arm, gripper) command counts when the last control tick went out
        self._paused = False
        self._reset_requested = False
        self._stop = threading.Event()
        # Set after the last episode when exit_when_done: node_main then ends the process (exit 0).
        self.done = threading.Event()
        self.state = "starting"
        self.waiting: list[str] = []
        rejections(self)
        self.failed = False
        self.sim_time = CLOCK_START
        self.episode_index = -1
        self.episode_start = CLOCK_START
        self.finished: list[conv.EpisodeInfo] = []
        self._held_target = np.zeros(8)
        self._applied_arm: np.ndarray | None = None
        self._applied_gripper: float | None = None
        self._ticks_published = 0
        # Realtime ground truth of command delivery, per control period (from one tick's
        # observation to the next): periods in which no arm command arrived (the arm tracks the
        # previous target for the whole period, as a ros2_control hardware interface would see a
        # missed command) and commands beyond the first in one period (_count_command_period).
        self.control_periods = 0
        self.periods_without_command = 0
        self.extra_commands = 0
        # Realtime, from the first episode on: how late the loop reached its publication times
        # (_pace) and why (arm_act.nodes.loop_timing).
        self.loop_timing = LoopTiming()
        self._tick_sent_at = self._arm_received_at = 0.0  # monotonic s: the last control tick out, arm command in
        self._period_arm_count: int | None = None
        self._episode_arm_count = 0
        self._last_images: dict[str, np.ndarray] | None = None
        # Images of the next camera tick, rendered before the realtime wait for that tick so
        # its observation (and /clock) goes out on time instead of a render later.
        self._prerendered: tuple[int, dict[str, np.ndarray]] | None = None
        # Realtime pacing: (wall s, sim s) of one reference kept across episodes and resets,
        # and the wall time the last env.reset took (the hold before a reset runs that far ahead).
        self._pace_ref: tuple[float, float] | None = None
        self._reset_wall_s = 0.0

    # ------------------------------------------------------------ command input
    @guarded("arm command (holding the last valid target)")
    def arm_command_callback(self, msg: Float64MultiArray) -> None:
        arm = conv.command_from_msg(msg, conv.ARM_JOINTS, "arm")
        with self._lock:
            self._arm_target = arm
            self._arm_count += 1
            self._arm_received_at = time.monotonic()
            self._lock.notify_all()

    @guarded("gripper command (holding the last valid target)")
    def gripper_command_callback(self, msg: Float64MultiArray) -> None:
        (opening,) = conv.command_from_msg(msg, 1, "gripper")
        with self._lock:
            self._gripper_target = float(opening)
            self._gripper_count += 1
            self._lock.notify_all()

    # ------------------------------------------------------------ services
    def reset_callback(self, request, response):
        with self._lock:
            self._reset_requested = True
            self._lock.notify_all()
        response.success, response.message = True, "next episode starts"
        return response

    def pause_callback(self, request, response):
        with self._lock:
            self._paused = True
        response.success, response.message = True, "paused"
        return response

    def unpause_callback(self, request, response):
        with self._lock:
            self._paused = False
            self._lock.notify_all()
        response.success, response.message = True, "running"
        return response

    # ------------------------------------------------------------ the physics thread
    @guarded("recorder matching report (ignored)")
    def _recorder_matches_callback(self, msg: String) -> None:
        report = json.loads(msg.data)
        if not isinstance(report, dict):
            raise ValueError(f"{msg.data!r} is not a JSON object")
        self._recorder_matches = {str(topic): int(count) for topic, count in report.items()}

    def _missing_peers(self) -> list[str]:
        """What the first episode waits for: a controller (wait_for_controller), the recorder
        subscribed to everything (wait_for_recorder)."""
        missing = []
        if self.get_parameter("wait_for_controller").value:
            controller = self._controller_readiness.missing()
            if controller is not None:
                missing.append(controller)
        if self.get_parameter("wait_for_recorder").value:
            name = str(self.get_parameter("recorder_node").value)
            namespace = self.get_namespace()
            own = [self.clock_pub, self.joint_pub, self.task_pub, self.episode_pub, self.objects_pub,
                   *self.image_pubs.values(), *self.info_pubs.values()]
            topics = {pub.topic_name: pub for pub in own}
            topics.update({self.resolve_topic_name(t): None for t in (conv.ARM_COMMAND_TOPIC,
                                                                       conv.GRIPPER_COMMAND_TOPIC)})
            reported = self.get_parameter("recorder_reports_matches").value
            matches = self._recorder_matches
            if reported and matches is None:
                missing.append(f"{name}'s report on {self._recorder_matches_topic} of the publishers its "
                               "readers have matched (wait_for_recorder)")
            unrecorded = []
            for topic, pub in topics.items():
                infos = self.get_subscriptions_info_by_topic(topic)
                present = any(i.node_name == name and i.node_namespace == namespace for i in infos)
                # Seen in the graph and matched by our writer (the graph is told a little earlier).
                if not present or (pub is not None and pub.get_subscription_count() < len(infos)):
                    unrecorded.append(topic)
                elif pub is None and reported and matches is not None:
                    # Another node's writer (the controller's commands): our graph shows it before
                    # the recorder's reader has matched it, and what it sends until then is lost.
                    publishers = self.count_publishers(topic)
                    if matches.get(topic, 0) < publishers:
                        unrecorded.append(f"{topic} (its reader has matched {matches.get(topic, 0)} of "
                                          f"{publishers} publishers)")
            if unrecorded:
                missing.append(f"{name} recording {', '.join(sorted(unrecorded))} (wait_for_recorder)")
        return missing

    def _wait_for_peers(self) -> None:
        """Before the first episode: wait for the controller and the recorder, saying what is
        missing every WAIT_REPORT_S wall seconds."""
        last_report = None
        while not self._stop.is_set():
            missing = self._missing_peers()
            self.waiting = missing
            if not missing:
                if last_report is not None:
                    self.get_logger().info("everything the first episode waits for is here")
                return
            now = time.monotonic()
            if last_report is None or now - last_report >= WAIT_REPORT_S:
                self.get_logger().info("waiting for " + "; ".join(missing))
                last_report = now
            self._stop.wait(0.05)

    def _run(self) -> None:
        realtime.name_os_thread("sim_loop")
        # The tick's thread on SCHED_FIFO (in the executable; ARM_ACT_REALTIME_TUNING=0: not).
        realtime.realtime_thread(self.thread_priority, "sim_loop thread", self.get_logger(), reception_threads=True)
        try:
            self.state = "waiting"
            self._wait_for_peers()
            realtime.settle()  # sim_node as an executable: freeze the heap before the first episode
            self.state = "running"
            while not self._stop.is_set() and self._start_next_episode():
                self._run_episode()
            if not self._stop.is_set():
                self.state = "done"
                if self.schedule.episodes and self.get_parameter("exit_when_done").value:
                    self.done.set()
        except Exception as exc:  # noqa: BLE001 - the node must report and exit, not idle on with a dead loop
            if not self._stop.is_set():
                self.get_logger().error(f"sim loop failed: {exc!r}")
                self.failed = True
                self.state = "failed"
                self.context.try_shutdown()

    def _start_next_episode(self) -> bool:
        spec = self.schedule.next()
        if spec is None:
            self.get_logger().info("all episodes done")
            return False
        self.episode_index += 1
        started = time.monotonic()
        self.env.reset(seed=spec.seed, n_blocks=spec.n_blocks)
        self._reset_wall_s = time.monotonic() - started
        self.episode_start = self.sim_time
        reset_pose = self.env.joint_state().position
        self._held_target = np.concatenate([reset_pose[:7], reset_pose[7:8]])
        self._applied_arm, self._applied_gripper = None, None
        with self._lock:
            self._arm_target = None
            self._gripper_target = None
            self._reset_requested = False
        # The clock first, so every node (the recorder too) receives the episode at its start time.
        self.clock_pub.publish(conv.clock_msg(self.sim_time))
        self.task_pub.publish(conv.task_msg(self.env.instruction))
        self._publish_episode("running")
        self.get_logger().info(
            f"episode {self.episode_index} seed {spec.seed} ({spec.n_blocks} blocks): {self.env.instruction}"
        )
        return True

    def _episode_info(self, state: str) -> conv.EpisodeInfo:
        return conv.EpisodeInfo(
            episode=self.episode_index, seed=self.env.seed, n_blocks=self.env.n_blocks, state=state,
            instruction=self.env.instruction, time=round(self.sim_time - self.episode_start, 6),
            start=self.episode_start, control_rate=self.control_rate, camera_rate=self.camera_rate,
        )

    def _publish_episode(self, state: str) -> None:
        self.episode_pub.publish(conv.episode_msg(self._episode_info(state)))

    def _run_episode(self) -> None:
        """One episode: per control tick, publish the observation, (lockstep) wait for the
        tick's command, apply the newest valid command, step; joint states in between."""
        step = 0
        self._prerendered = None
        deferred = None  # a joint state computed ahead of its time (_runs_ahead), not yet published
        if self.mode == "realtime" and self.real_time_factor > 0:
            # The first tick is a camera tick too: render it before its time, not in its
            # publication (which went out a render late: 10 ms at 10 Hz cameras on 2 cores,
            # and each episode's first command with it); the next hold makes the render
            # time up along with the reset's.
            started = time.monotonic()
            self._prerendered = (0, self._render(start=True))
            self._reset_wall_s += time.monotonic() - started
            self._pace(what="episode start")
        while not self._stop.is_set():
            if step % self.steps_per_command == 0:
                self._count_command_period(step)
                with self._lock:  # the commands that answer this tick are the ones after these
                    self._tick_counts = (self._arm_count, self._gripper_count)
                self._publish_observation(step)
                if not self._wait_for_command():
                    return
                self._apply_latest_command()
            else:
                if self._runs_ahead(step):
                    # This step's joint state goes out at its time, after the camera tick's
                    # physics step and render (below), which no longer wait for it.
                    deferred = self._joint_state_msgs()
                else:
                    self._publish_joint_state()
                # Realtime: a command that came after its tick's observation went out (they
                # all do: the controller answers that observation) acts from the next step,
                # as a position controller tracks its newest setpoint, instead of a whole
                # control period late. (Lockstep has no steps between control ticks.)
                self._apply_latest_command()
            self._step()
            step += 1
            self.sim_time = self.episode_start + step / self.step_rate
            status = self.env.status()
            if deferred is not None and (status != "running" or self._reset_requested):
                deferred = self._publish_deferred(deferred)
            if status != "running" or self._reset_requested:
                state = status if status != "running" else "failure"
                if self.mode == "realtime":
                    # (In lockstep every published control tick asks for one command, so the
                    # final state is not published as a tick.)
                    self._publish_joint_state()
                self._publish_episode(state)
                self.finished.append(self._episode_info(state))
                self.get_logger().info(
                    f"episode {self.episode_index} ended: {state} after "
                    f"{self.sim_time - self.episode_start:.2f} s"
                )
                if self.mode == "realtime":
                    # Status is checked every step, so an episode can end between two control
                    # ticks: the hold ends on the control-period grid again, so the next
                    # episode starts on it. The controllers tick where /clock crosses multiples
                    # of the control period; an episode starting half a period off used to get
                    # its commands half a period late, for ticks 0, 2, 2, 4, 4, ... (rounded
                    # stamps), each clamped by the joint-speed limit on the double step.
                    self._hold(self.reset_pause, ended_at_step=step)
                # The next episode starts one control period later on the same clock.
                self.sim_time += 1.0 / self.control_rate
                return
            if self.mode == "realtime" and self.real_time_factor > 0:
                if step % self.steps_per_frame == 0 and step % self.steps_per_command == 0:
                    # The world does not change until the next env.step(), so this is the
                    # picture the tick would render; rendering it inside the slack keeps the
                    # tick's publication on the wall-clock schedule (docs/architecture.md, "Threading").
                    self._prerendered = (step, self._render())
                if deferred is not None:
                    deferred = self._publish_deferred(deferred)
                if self._runs_ahead(step):
                    with self._lock:
                        arm0, gripper0 = self._tick_counts
                    self._pace(until=lambda a=arm0, g=gripper0: self._arm_count > a and self._gripper_count > g,
                               what="joint state ahead of a camera tick")
                else:
                    self._pace(what="control tick" if step % self.steps_per_command == 0 else "joint state")

    def _runs_ahead(self, step: int) -> bool:
        """Realtime: is `step` the joint-state step just before a camera tick? Its physics
        step and the camera tick's render then run as soon as the controllers' commands for
        the tick before have arrived (or at the step's time at the latest), and the step's
        joint state goes out at its time from a copy. The world of the camera tick depends on
        nothing newer (the next commands answer the camera tick itself), so the physics is
        the same; the render gets the ~5 ms the commands take plus the step (measured with
        10 Hz cameras on 2 cores: rendering both cameras took 10.4 ms p50, 13.9 ms p99 in the
        sim_node process, longer than the 10 ms step it had, so camera ticks went out 2.4 ms
        late at the median, 6 ms at p99, and their commands with them)."""
        nxt = step + 1
        return (self.mode == "realtime" and self.real_time_factor > 0 and step % self.steps_per_command != 0
                and nxt % self.steps_per_command == 0 and nxt % self.steps_per_frame == 0)

    def _joint_state_msgs(self) -> tuple[float, object, object]:
        """(stamp s, /clock, joint state) of now, to publish later (_publish_deferred)."""
        js = self.env.joint_state()
        t = self.sim_time
        return t, conv.clock_msg(t), conv.joint_state_msg(t, js.position, js.velocity, js.effort, js.names)

    def _publish_deferred(self, deferred) -> None:
        """Publish a joint state made ahead (_joint_state_msgs) once the wall clock reaches
        its stamp; returns None (no longer deferred)."""
        t, clock, joints = deferred
        self._pace(lead=self.sim_time - t, what="joint state made ahead")
        self.clock_pub.publish(clock)
        self.joint_pub.publish(joints)
        return None

    def _step(self) -> None:
        self.loop_timing.timed("step", self.env.step, counted=self.state == "running")

    def _render(self, start: bool = False):
        """Both cameras' images; `start`: the episode's first (part of its reset)."""
        return self.loop_timing.timed("render", self.env.render, counted=self.state == "running", start=start)

    def _pace(self, lead: float = 0.0, until=None, what: str = "tick", run_ahead: float = 0.0) -> None:
        """Realtime: wait until the wall clock reaches sim_time (less `lead` s: the stamp of the
        publication that comes next, `what`) on one reference for the whole run, so the time
        episode resets take is made up (in the hold before them, which runs `run_ahead` s ahead
        of its stamps) rather than lost: the real-time factor stays 1 across episodes. Further
        behind than MAX_LAG_S, the reference moves to now. A publication reached after its
        stamp's time is late (LoopTiming); one reached within run_ahead of it is not."""
        if self.mode != "realtime" or self.real_time_factor <= 0:
            return
        now = time.monotonic()
        if self._pace_ref is None:
            self._pace_ref = (now, self.sim_time)
            return
        wall0, sim0 = self._pace_ref
        ahead = (self.sim_time - sim0) / self.real_time_factor - (now - wall0) - lead - run_ahead
        counted = self.state == "running"
        late_s = -(ahead + run_ahead)
        if late_s > 0 and counted:  # reached this publication after its stamp's time
            self.loop_timing.late(now, late_s * 1e3, self.episode_index, self.sim_time - lead - self.episode_start,
                                  what, tick_sent_at=self._tick_sent_at, answered_at=self._arm_received_at)
        if late_s > OVERRUN_PERIODS / self.control_rate:
            self._pace_ref = (now, self.sim_time - lead)  # this publication's stamp is now
            ahead = -run_ahead
            if counted:
                self.loop_timing.overrun(late_s * 1e3)
                self.get_logger().warning(
                    f"overrun: {what} at {self.sim_time - lead - self.episode_start:.2f} s of episode "
                    f"{self.episode_index} reached {late_s * 1e3:.1f} ms after its time; the loop continues "
                    f"from it ({self.loop_timing.overruns} overruns, {self.loop_timing.skipped_ms:.0f} ms "
                    f"skipped)", throttle_duration_sec=10.0)
        if ahead > 0 and until is not None:
            # ... or until `until()` (called with the lock held) comes true before then
            deadline = now + ahead
            with self._lock:
                while not until() and not self._stop.is_set():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._lock.wait(remaining)
        elif ahead > 0:
            self._stop.wait(ahead)
        elif ahead < -MAX_LAG_S:
            self._pace_ref = (now, self.sim_time)
        self.loop_timing.woke(time.monotonic(), now + ahead if ahead > 0 else None, counted)

    def _count_command_period(self, step: int) -> None:
        """Realtime, at each control tick before its observation goes out: count the arm
        commands that arrived in the period ending now. Counting starts at the first tick after
        the episode's first command (a realtime policy sends nothing before its first chunk,
        by design: the arm holds its reset pose); a paused period is not counted."""
        with self._lock:
            count, paused = self._arm_count, self._paused
        if step == 0:
            self._episode_arm_count, self._period_arm_count = count, None
            return
        if self.mode != "realtime" or paused:
            self._period_arm_count = None if self._period_arm_count is None else count
            return
        if self._period_arm_count is None:
            if count > self._episode_arm_count:
                self._period_arm_count = count
            return
        new = count - self._period_arm_count
        self.control_periods += 1
        if new == 0:
            self.periods_without_command += 1
        elif new > 1:
            self.extra_commands += new - 1
        self._period_arm_count = count

    def _apply_latest_command(self) -> None:
        with self._lock:
            arm, gripper = self._arm_target, self._gripper_target
        if arm is None and gripper is None:
            return  # nothing received this episode: the env holds its reset pose
        held = self._held_target
        arm = held[:7] if arm is None else arm
        gripper = float(held[7]) if gripper is None else gripper
        if arm is self._applied_arm and gripper == self._applied_gripper:
            return
        self.env.apply_command(arm, gripper)
        self._applied_arm, self._applied_gripper = arm, gripper

    def _wait_for_command(self) -> bool:
        """Holds while paused; in lockstep, blocks until the controller's command for this
        tick arrived (one arm and one gripper command per published control tick, counted
        since the node started). While waiting, the tick's observation is re-sent now and
        then so a controller that starts late still receives it. Returns False on stop."""
        with self._lock:
            while self._paused and not self._stop.is_set():
                self._lock.wait(0.1)
            if self.mode != "lockstep":
                return not self._stop.is_set()
            self._ticks_published += 1
            waited = 0.0
            while not self._stop.is_set() and (
                self._arm_count < self._ticks_published or self._gripper_count < self._ticks_published
            ):
                self._lock.wait(0.05)
                waited += 0.05
                if waited >= self.lockstep_timeout:
                    self.get_logger().warning(
                        f"lockstep: no command for t={self.sim_time:.3f} after {waited:.0f} s "
                        f"(arm {self._arm_count}, gripper {self._gripper_count} of "
                        f"{self._ticks_published} ticks); still waiting"
                    )
                    waited = 0.0
                if self._arm_count == 0 and waited and round(waited / 0.05) % 20 == 0:
                    self._lock.release()
                    try:
                        self._publish_observation(0, resend=True)
                    finally:
                        self._lock.acquire()
            return not self._stop.is_set()

    def _publish_observation(self, step: int, resend: bool = False) -> None:
        """Per control tick: /clock first, then the images (on camera ticks), objects and
        joint states stamped with it. Nothing is published before the clock reached its
        stamp (a bag's receipt times never precede the messages' own stamps); a controller
        acts on the tick once its joint state is here (ControllerNode.clock_tick_callback).
        A camera tick may be rendered ahead, inside the slack before the tick; it is
        published only at the tick."""
        t = self.sim_time
        if not resend:
            self._tick_sent_at = time.monotonic()
        self.clock_pub.publish(conv.clock_msg(t))
        if step % self.steps_per_frame == 0:
            if self._prerendered is not None and self._prerendered[0] == step and not resend:
                self._last_images = self._prerendered[1]
            elif not resend or self._last_images is None:
                self._last_images = self._render()
            self._prerendered = None
            for name, rgb in self._last_images.items():
                k = self.env.camera_intrinsics(name)
                self.image_pubs[name].publish(conv.image_msg(t, rgb, name))
                self.info_pubs[name].publish(conv.camera_info_msg(t, name, rgb.shape[1], rgb.shape[0], k))
        if self.objects_pub.get_subscription_count():
            # Only for a reader (the expert, a recorder, a viewer): reading the objects and
            # building the MarkerArray cost ~1 ms of the tick's path before its joint state.
            self.objects_pub.publish(conv.objects_msg(t, self.env.objects()))
        self._publish_joint_state(clock=False)

    def _publish_joint_state(self, clock: bool = True) -> None:
        if clock:
            self.clock_pub.publish(conv.clock_msg(self.sim_time))
        js = self.env.joint_state()
        self.joint_pub.publish(conv.joint_state_msg(self.sim_time, js.position, js.velocity, js.effort, js.names))

    def publish_diagnostics(self) -> None:
        """sim/diagnostics, every wall second: state, episode, what the first episode waits for."""
        waiting = list(self.waiting) if self.state == "waiting" else []
        values = {"state": self.state, "episode": str(self.episode_index), "sim_time": f"{self.sim_time:.3f}",
                  "waiting_for": "; ".join(waiting) or "nothing", "paused": str(self._paused).lower(),
                  "rejected_messages": str(rejections(self).total),
                  "control_periods": str(self.control_periods),
                  "periods_without_command": str(self.periods_without_command),
                  "extra_commands": str(self.extra_commands),
                  "memory_locked": str(realtime.memory_locked()).lower(),
                  **self.loop_timing.values(),
                  **gc_values()}
        level = DiagnosticStatus.WARN if waiting or self.state == "failed" else DiagnosticStatus.OK
        message = ("waiting for " + "; ".join(waiting)) if waiting else self.state
        status = DiagnosticStatus(level=level, name=f"{self.get_name()}: sim", message=message, hardware_id="arm_act",
                                  values=[KeyValue(key=k, value=v) for k, v in values.items()])
        array = DiagnosticArray(status=[status])
        array.header.stamp = conv.to_stamp(self.sim_time)
        self.diag_pub.publish(array)

    def _hold(self, seconds: float, ended_at_step: int = 0) -> None:
        """Realtime: keep the world running and publishing for `seconds` of sim time before
        the next episode, so viewers see how it ended; rounded up to end on the control-period
        grid of an episode that ended after `ended_at_step` steps."""
        steps = int(round(seconds * self.step_rate))
        steps += -(ended_at_step + steps) % self.steps_per_command
        for _ in range(steps):
            if self._stop.is_set():
                return
            self._step()
            self.sim_time += 1.0 / self.step_rate
            self._publish_joint_state()
            self._pace(run_ahead=min(self._reset_wall_s, seconds), what="hold")

    def destroy_node(self):
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5.0)
        self.env.close()
        return super().destroy_node()


def main(args=None):
    from arm_act.ros.node_main import spin_node

    # sim_node is the clock: it runs on the wall clock (its loop paces itself) unless told otherwise.
    spin_node(SimNode, args, use_sim_time=False)


if __name__ == "__main__":
    main()
