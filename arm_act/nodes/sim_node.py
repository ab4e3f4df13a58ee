"""sim_node: the PyBullet world on ROS 2 topics.

Publishes /clock, joint_states, camera/<name>/image_raw + camera_info, task, episode and
objects; applies arm_controller/commands and gripper_controller/commands the way
forward_command_controller does (wrong length or non-finite values are rejected with a
logged reason and the last valid target is held).

New goals while it runs: a text on `task` other than the running instruction (from any
publisher but this node) changes the episode's goal at the next control tick
(arm_act.nodes.sim_goals, ArmEnv.change_goal); the episode message goes out again at once
with the new instruction and the change in goal_changes. Words that give no goal on this
table are refused with one warning line (and in sim/diagnostics); the goal stays.

Modes (docs/architecture.md, "Modes"): ``realtime`` paces physics to the wall clock (or runs as fast as
rendering allows with real_time_factor 0), always publishing /clock; ``lockstep`` advances one
control period only after the command for the current tick has arrived, so the same seed
gives the same trajectory bit for bit.

The physics runs in its own thread, not in an executor callback: a physics step plus two
renders takes tens of milliseconds, and the command subscriptions and services must stay
responsive meanwhile. Sim time is continuous across episodes (/clock never jumps back).

This node holds the lifecycle, the parameters, the ROS interfaces and the publications; its
parts are ROS-free: the parameters read at start (sim_parameters), the episode loop
(sim_loop.SimLoop), its wall-clock pacing (sim_pacing), the command input and its count per
control period (sim_commands), and the peers the first episode waits for (readiness).
"""
from __future__ import annotations

import threading

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
from arm_act.nodes.guard import guard_time_source, guarded, rejections
from arm_act.nodes.loop_timing import LoopTiming
from arm_act.nodes.readiness import ControllerReadiness, PeerWait, RecorderReadiness
from arm_act.nodes.scheduling import gc_values, normal_when_unpaced
from arm_act.nodes.sim_commands import CommandInbox, CommandPeriods
from arm_act.nodes.sim_goals import GoalInbox
from arm_act.nodes.sim_loop import SimLoop
from arm_act.nodes.sim_pacing import StepGrid
from arm_act.nodes.sim_parameters import declare_parameters, read_settings
from arm_act.ros import conversions as conv
from arm_act.ros.conversions import CLOCK_START
from arm_act.ros.qos import TRANSIENT_LOCAL


class SimNode(Node):
    realtime_process = True  # its executable gets arm_act/common/realtime.py's settings

    # The episode loop's clock (sim s) and episode (-1 before the first).
    sim_time = property(lambda self: self.loop.sim_time)
    episode_index = property(lambda self: self.loop.episode_index)
    episode_start = property(lambda self: self.loop.episode_start)
    # Realtime command delivery per control period (sim_commands.CommandPeriods).
    control_periods = property(lambda self: self.command_periods.control_periods)
    periods_without_command = property(lambda self: self.command_periods.periods_without_command)
    extra_commands = property(lambda self: self.command_periods.extra_commands)
    # What the first episode still waits for (the latest check before it started).
    waiting = property(lambda self: self._peers.waiting)

    def __init__(self, **kwargs):
        super().__init__("sim_node", **kwargs)
        guard_time_source(self)  # with use_sim_time set on it, a stray negative /clock must not stop it
        declare_parameters(self)
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

    def _read_parameters(self) -> None:
        """The rates, the episode schedule and the world, from the parameters (fixed at start)."""
        s = self.settings = read_settings(self)
        self.thread_priority, self.mode, self.real_time_factor = s.thread_priority, s.mode, s.real_time_factor
        self.control_rate, self.joint_state_rate, self.camera_rate = s.control_rate, s.joint_state_rate, s.camera_rate
        self.step_rate, self.reset_pause, self.lockstep_timeout = s.step_rate, s.reset_pause, s.lockstep_timeout
        self.steps_per_command = self.step_rate // self.control_rate
        self.steps_per_frame = self.step_rate // self.camera_rate
        self.grid = StepGrid(self.steps_per_command, self.steps_per_frame)
        self.schedule = s.schedule
        self.env = s.make_env()
        self.cameras = [c.name for c in s.config.cameras]

    def _create_interfaces(self) -> None:
        """Publishers, the command subscriptions, services, diagnostics and the peers the first
        episode waits for (a controller, the recorder)."""
        self._controller_readiness = ControllerReadiness(self, conv.ARM_COMMAND_TOPIC)
        self._recorder = RecorderReadiness(self, self.resolve_topic_name(
            f"{self.get_parameter('recorder_node').value}/{conv.RECORDER_MATCHES_TOPIC}"))
        if self.get_parameter("wait_for_recorder").value and self.get_parameter("recorder_reports_matches").value:
            self.create_subscription(String, self._recorder.matches_topic, self._recorder_matches_callback,
                                     TRANSIENT_LOCAL)
        self.clock_pub = self.create_publisher(Clock, "/clock", 10)
        self.joint_pub = self.create_publisher(JointState, "joint_states", 10)
        self.image_pubs = {n: self.create_publisher(Image, f"camera/{n}/image_raw", 10) for n in self.cameras}
        self.info_pubs = {n: self.create_publisher(CameraInfo, f"camera/{n}/camera_info", 10) for n in self.cameras}
        self.task_pub = self.create_publisher(String, "task", TRANSIENT_LOCAL)
        # Volatile (reliable): it matches publishers of either durability, and a transient-local
        # one's history (this node's own last instruction, an old episode's) is not replayed.
        self.create_subscription(String, "task", self.task_callback, 10)
        self.episode_pub = self.create_publisher(String, "episode", TRANSIENT_LOCAL)
        self.objects_pub = self.create_publisher(MarkerArray, "objects", 10)
        self.create_subscription(Float64MultiArray, conv.ARM_COMMAND_TOPIC, self.arm_command_callback, 10)
        self.create_subscription(Float64MultiArray, conv.GRIPPER_COMMAND_TOPIC, self.gripper_command_callback, 10)
        for name in ("reset", "pause", "unpause"):
            self.create_service(Trigger, f"~/{name}", lambda _, response, n=name: self._trigger(n, response))
        self.diag_pub = self.create_publisher(DiagnosticArray, "sim/diagnostics", 10)
        self.create_timer(1.0, self.publish_diagnostics, clock=RosClock(clock_type=ClockType.STEADY_TIME))

    def _init_state(self) -> None:
        """The loop's parts: commands in, their count per control period, loop timing, the wait
        for peers and the episode loop; the node's state and the episodes finished."""
        self._stop = threading.Event()
        # Set after the last episode when exit_when_done: node_main then ends the process (exit 0).
        self.done = threading.Event()
        self.state = "starting"
        rejections(self)
        self.failed = False
        self.finished: list[conv.EpisodeInfo] = []
        self.commands = CommandInbox()
        self.goals = GoalInbox()
        self.command_periods = CommandPeriods()
        # Realtime, from the first episode on: how late the loop reached its publication times
        # and why (arm_act.nodes.loop_timing).
        self.loop_timing = LoopTiming()
        self._peers = PeerWait(self._missing_peers, self.get_logger())
        self.loop = SimLoop(
            self.env, self.grid, self, mode=self.mode, real_time_factor=self.real_time_factor,
            control_rate=self.control_rate, step_rate=self.step_rate, reset_pause=self.reset_pause,
            lockstep_timeout=self.lockstep_timeout, commands=self.commands, periods=self.command_periods,
            timing=self.loop_timing, stop=self._stop, logger=self.get_logger(),
            counted=lambda: self.state == "running", start_time=CLOCK_START, before_tick=self._apply_goal_changes)

    # ------------------------------------------------------------ command input and services
    @guarded("arm command (holding the last valid target)")
    def arm_command_callback(self, msg: Float64MultiArray) -> None:
        self.commands.put_arm(conv.command_from_msg(msg, conv.ARM_JOINTS, "arm"))

    @guarded("gripper command (holding the last valid target)")
    def gripper_command_callback(self, msg: Float64MultiArray) -> None:
        (opening,) = conv.command_from_msg(msg, 1, "gripper")
        self.commands.put_gripper(float(opening))

    def _trigger(self, name: str, response):
        """~/reset (the next episode starts now), ~/pause and ~/unpause (CommandInbox.service)."""
        response.success, response.message = True, self.commands.service(name)
        return response

    @guarded("task (a new instruction; ignored)")
    def task_callback(self, msg: String) -> None:
        """A new instruction: kept for the next control tick of the running episode (the
        sim_loop thread applies it). This node's own publication (at an episode's start) is
        that episode's instruction, which GoalInbox takes as no change. One parameter: the
        executables' EventsExecutor cannot call a (msg, info) callback."""
        self.goals.put(str(msg.data), self.episode_index if self.state == "running" else -1)

    def _apply_goal_changes(self) -> None:
        """At a control tick (sim_loop thread): apply the new instructions that came in."""
        for outcome in self.goals.apply(self.env, self.episode_index):
            text = outcome.text[:80]
            if outcome.kind == "changed":
                self._publish_episode("running")
                self.get_logger().info(f"episode {self.episode_index}: goal changed at "
                                       f"{self.sim_time - self.episode_start:.2f} s: {text!r}")
            elif outcome.kind == "refused":
                self.get_logger().warning(f"instruction {text!r} refused, the goal stays "
                                          f"{self.env.instruction!r}: {outcome.reason}")
            elif outcome.kind == "dropped":
                self.get_logger().warning(f"instruction {text!r} ignored: {outcome.reason}")

    @guarded("recorder matching report (ignored)")
    def _recorder_matches_callback(self, msg: String) -> None:
        self._recorder.report(msg.data)

    # ------------------------------------------------------------ the physics thread
    def _missing_peers(self) -> list[str]:
        """What the first episode waits for: a controller (wait_for_controller), the recorder
        subscribed to everything (wait_for_recorder)."""
        missing = []
        if self.get_parameter("wait_for_controller").value:
            controller = self._controller_readiness.missing()
            if controller is not None:
                missing.append(controller)
        if self.get_parameter("wait_for_recorder").value:
            own = [self.clock_pub, self.joint_pub, self.task_pub, self.episode_pub, self.objects_pub,
                   *self.image_pubs.values(), *self.info_pubs.values()]
            topics = {pub.topic_name: pub for pub in own}
            topics.update({self.resolve_topic_name(t): None for t in (conv.ARM_COMMAND_TOPIC,
                                                                       conv.GRIPPER_COMMAND_TOPIC)})
            missing += self._recorder.missing(str(self.get_parameter("recorder_node").value),
                                              self.get_parameter("recorder_reports_matches").value, topics)
        return missing

    def _run(self) -> None:
        realtime.name_os_thread("sim_loop")
        # The tick's thread on SCHED_FIFO (in the executable; ARM_ACT_REALTIME_TUNING=0: not).
        realtime.realtime_thread(self.thread_priority, "sim_loop thread", self.get_logger(), reception_threads=True)
        try:
            self.state = "waiting"
            self._peers.run(self._stop)
            realtime.settle()  # sim_node as an executable: freeze the heap before the first episode
            self.state = "running"
            while not self._stop.is_set() and self._start_next_episode():
                self.loop.run_episode()
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
        self.loop.start_episode(spec.seed, spec.n_blocks)
        # The clock first, so every node (the recorder too) receives the episode at its start time.
        self.clock_pub.publish(conv.clock_msg(self.sim_time))
        self.task_pub.publish(conv.task_msg(self.env.instruction))
        self._publish_episode("running")
        self.get_logger().info(
            f"episode {self.episode_index} seed {spec.seed} ({spec.n_blocks} blocks): {self.env.instruction}"
        )
        return True

    # ------------------------------------------------------------ publications (SimLoop's EpisodeOutput)
    def _episode_info(self, state: str) -> conv.EpisodeInfo:
        return conv.EpisodeInfo(
            episode=self.episode_index, seed=self.env.seed, n_blocks=self.env.n_blocks, state=state,
            instruction=self.env.instruction, time=round(self.sim_time - self.episode_start, 6),
            start=self.episode_start, control_rate=self.control_rate, camera_rate=self.camera_rate,
            colours=tuple(sorted({o.colour for o in self.env.objects() if o.kind == "block"})),
            goal_changes=tuple({"time": round(t, 6), "instruction": text} for t, text in self.env.goal_changes) or None,
        )

    def _publish_episode(self, state: str) -> None:
        self.episode_pub.publish(conv.episode_msg(self._episode_info(state)))

    def episode_ended(self, state: str) -> None:
        self._publish_episode(state)
        self.finished.append(self._episode_info(state))
        self.get_logger().info(
            f"episode {self.episode_index} ended: {state} after {self.sim_time - self.episode_start:.2f} s")

    def observation(self, step: int, resend: bool = False) -> None:
        """Per control tick: /clock first, then the images (on camera ticks), objects and
        joint states stamped with it. Nothing is published before the clock reached its
        stamp (a bag's receipt times never precede the messages' own stamps); a controller
        acts on the tick once its joint state is here (ControllerNode.clock_tick_callback).
        A camera tick may be rendered ahead, inside the slack before the tick; it is
        published only at the tick."""
        t = self.sim_time
        self.clock_pub.publish(conv.clock_msg(t))
        images = self.loop.camera_images(step, resend)
        for name, rgb in (images or {}).items():
            k = self.env.camera_intrinsics(name)
            self.image_pubs[name].publish(conv.image_msg(t, rgb, name))
            self.info_pubs[name].publish(conv.camera_info_msg(t, name, rgb.shape[1], rgb.shape[0], k))
        if self.objects_pub.get_subscription_count():
            # Only for a reader (the expert, a recorder, a viewer): reading the objects and
            # building the MarkerArray costs time on the tick's path before its joint state.
            self.objects_pub.publish(conv.objects_msg(t, self.env.objects()))
        self.joint_state(clock=False)

    def joint_state(self, clock: bool = True) -> None:
        if clock:
            self.clock_pub.publish(conv.clock_msg(self.sim_time))
        js = self.env.joint_state()
        self.joint_pub.publish(conv.joint_state_msg(self.sim_time, js.position, js.velocity, js.effort, js.names))

    def joint_state_later(self) -> tuple[Clock, JointState]:
        """(/clock, joint state) of now, to publish later (publish_later)."""
        js = self.env.joint_state()
        t = self.sim_time
        return conv.clock_msg(t), conv.joint_state_msg(t, js.position, js.velocity, js.effort, js.names)

    def publish_later(self, made: tuple[Clock, JointState]) -> None:
        clock, joints = made
        self.clock_pub.publish(clock)
        self.joint_pub.publish(joints)

    def publish_diagnostics(self) -> None:
        """sim/diagnostics, every wall second: state, episode, what the first episode waits for."""
        waiting = list(self.waiting) if self.state == "waiting" else []
        values = {"state": self.state, "episode": str(self.episode_index), "sim_time": f"{self.sim_time:.3f}",
                  "waiting_for": "; ".join(waiting) or "nothing", "paused": str(self.commands.paused).lower(),
                  "rejected_messages": str(rejections(self).total),
                  "goal_changes": str(len(self.env.goal_changes)) if self.episode_index >= 0 else "0",
                  "refused_instructions": str(self.goals.refused),
                  "last_refused_instruction": self.goals.last_refusal or "none",
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

    def destroy_node(self):
        self._stop.set()
        with self.commands.lock:
            self.commands.lock.notify_all()
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
