"""ControllerNode: what expert_node and policy_node share.

It keeps the latest observation (joint states, task, episode, objects), decides when a
command is due and publishes arm_controller/commands + gripper_controller/commands.

Two timing modes, matching sim_node's:
- ``realtime``: a control tick each time /clock crosses the next multiple of the control
  period (a wall-clock timer without sim time) publishes a command from whatever the node
  holds (the control rate never waits for inference).
- ``lockstep``: one command per control tick the sim publishes, computed once the
  observation stamped with that tick is complete (joint states, plus both images on camera
  ticks for the policy). The sim waits for exactly one command per tick, so the node
  answers every tick, with a hold command when it has nothing better.
"""
from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock as RosClock
from rclpy.clock import ClockType
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from visualization_msgs.msg import MarkerArray

from arm_act.nodes.guard import guard_time_source, guarded, rejections
from arm_act.nodes.loop_timing import AnswerTiming
from arm_act.policy.runtime import ARM_LOWER, ARM_UPPER, GRIPPER_RANGE
from arm_act.ros import conversions as conv
from arm_act.ros.qos import TRANSIENT_LOCAL

# Wall seconds between "waiting for ..." reports (log and diagnostics) while an input is missing.
WAIT_REPORT_S = 3.0
# Joint states further than this outside the Panda's limits are not a measurement (rad).
JOINT_LIMIT_MARGIN = 0.25
# Joint states stamped further ahead of this node's clock are rejected (s).
MAX_FUTURE_S = 1.0
# /clock going back by more than this means a new timeline (sim_node restarted): follow it (ns).
CLOCK_RESET_NS = 1_000_000_000
MAX_INSTRUCTION_CHARS = 500


class ControllerNode(Node, ABC):
    """Base class; subclasses implement `compute_command(stamp_ns, tick)` and may extend
    `observation_complete` and `on_new_episode`."""

    # Whether the controller reads the ground-truth object markers (the expert does; a
    # policy must not, and skipping the 50 Hz MarkerArray conversions saves its CPU).
    uses_objects = False
    # Where the node reports its state (DiagnosticArray on a wall-clock timer, so it also
    # says what it waits for when no /clock comes); None: the subclass publishes its own.
    diagnostics_topic: str | None = None

    def __init__(self, name: str, **kwargs):
        super().__init__(name, **kwargs)
        self.declare_parameter("mode", "realtime")
        self.declare_parameter("control_rate", 50)
        self.mode = str(self.get_parameter("mode").value)
        if self.mode not in ("realtime", "lockstep"):
            raise ValueError(f"mode={self.mode!r} must be 'realtime' or 'lockstep'")
        self.control_rate = int(self.get_parameter("control_rate").value)
        if self.control_rate < 1:
            raise ValueError(f"control_rate={self.control_rate} must be >= 1")

        self.lock = threading.RLock()
        self.joint_positions: np.ndarray | None = None  # (9,)
        self.joint_stamp_ns = -1
        self.instruction: str | None = None
        self.episode: conv.EpisodeInfo | None = None
        self.objects: list[conv.ObjectMarker] | None = None
        self.objects_stamp_ns = -1
        self.last_command: tuple[np.ndarray, float] | None = None
        self._answered_ns = -1
        self._pending_ns: int | None = None
        self._active_episode: int | None = None
        self.commands_published = 0
        self.rejected_commands = 0
        self._due_ns: int | None = None  # realtime: a control tick waiting for its joint state
        self._clock_ns = -1  # the newest /clock received
        self.waiting: list[str] = []  # what the node still waits for (the last report)
        self._reported_waiting: list[str] = []  # what the log last said it waits for
        rejections(self)

        self.arm_pub = self.create_publisher(Float64MultiArray, conv.ARM_COMMAND_TOPIC, 10)
        self.gripper_pub = self.create_publisher(Float64MultiArray, conv.GRIPPER_COMMAND_TOPIC, 10)
        # Realtime: when each tick's /clock and joint state came in (system clock ns), to time the answer.
        self.answer_timing = AnswerTiming(self.control_rate)
        self._tick_in: dict[int, int] = {}  # stamp -> /clock callback (only the latest few)
        self._joint_in: tuple[int, int] | None = None  # (stamp, joint state callback)
        self.create_subscription(JointState, "joint_states", self._joint_state_in, 10)
        self.create_subscription(String, "task", self.task_callback, TRANSIENT_LOCAL)
        self.create_subscription(String, "episode", self.episode_callback, TRANSIENT_LOCAL)
        if self.uses_objects:
            self.create_subscription(MarkerArray, "objects", self.objects_callback, 10)
        guard_time_source(self)
        self.missed_ticks = 0
        self._last_tick_index: int | None = None
        if self.mode == "realtime":
            # The control "timer" on sim time is driven by /clock itself: rclpy's own timers
            # on sim time fired at 17-44 Hz instead of 50 Hz beside a 100 Hz /clock here
            # (measured), so a tick runs whenever the clock crosses the next multiple of the
            # control period. Without sim time: a timer. The nodes spin on a
            # single-threaded executor (arm_act.ros.node_main), where the callback group changes
            # nothing: the tick runs between the other callbacks, each of them short
            # (docs/architecture.md, "Threading").
            group = MutuallyExclusiveCallbackGroup()
            if self.get_parameter("use_sim_time").value:
                self.create_subscription(Clock, "/clock", self.clock_tick_callback, 10, callback_group=group)
            else:
                self.create_timer(1.0 / self.control_rate, self.control_timer_callback, callback_group=group)
        elif self.get_parameter("use_sim_time").value:
            self.create_subscription(Clock, "/clock", self._note_clock, 10)
        self._steady = RosClock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(WAIT_REPORT_S, self.report_waiting, clock=self._steady)
        self.diag_pub = None
        if self.diagnostics_topic is not None:
            self.diag_pub = self.create_publisher(DiagnosticArray, self.diagnostics_topic, 10)
            self.create_timer(1.0, self.publish_controller_diagnostics, clock=self._steady)

    # ------------------------------------------------------------ observation input
    @guarded("joint_states")
    def _joint_state_in(self, msg: JointState) -> None:
        """joint_state_callback, noting when it began first: the tick it completes acts inside
        it (AnswerTiming)."""
        with self.lock:
            self._joint_in = (conv.stamp_to_ns(msg.header.stamp), time.time_ns())
        self.joint_state_callback(msg)

    @guarded("joint_states")
    def joint_state_callback(self, msg: JointState) -> None:
        positions = conv.joint_positions_from_msg(msg)
        arm = positions[:7]
        outside = (arm < ARM_LOWER - JOINT_LIMIT_MARGIN) | (arm > ARM_UPPER + JOINT_LIMIT_MARGIN)
        fingers = positions[7:]
        if outside.any() or np.any(fingers < -0.01) or np.any(fingers > GRIPPER_RANGE[1] + 0.01):
            raise conv.ConversionError(f"joint_states outside the Panda's joint limits: {positions.tolist()}")
        stamp = conv.stamp_to_ns(msg.header.stamp)
        if self._clock_ns >= 0 and stamp > self._clock_ns + MAX_FUTURE_S * 1e9:
            raise conv.ConversionError(f"joint_states stamped {stamp * 1e-9:.3f} s, more than {MAX_FUTURE_S:.0f} s "
                                       f"ahead of /clock ({self._clock_ns * 1e-9:.3f} s)")
        with self.lock:
            self.joint_positions, self.joint_stamp_ns = positions, stamp
            if self.mode == "lockstep" and stamp > self._answered_ns:
                self._pending_ns = stamp
            due = self._due_ns
            if due is not None and stamp >= due:
                self._due_ns = None
                self.control_timer_callback(due)
        self.try_lockstep_tick()

    @guarded("task")
    def task_callback(self, msg: String) -> None:
        instruction = self._checked_instruction(msg.data, "task")
        with self.lock:
            self.instruction = instruction

    @staticmethod
    def _checked_instruction(text: str, what: str) -> str:
        text = text.strip()
        if not text or len(text) > MAX_INSTRUCTION_CHARS or not text.isprintable():
            raise conv.ConversionError(f"{what} is not an instruction (empty, over {MAX_INSTRUCTION_CHARS} "
                                       f"characters or unprintable): {text[:80]!r}")
        return text

    @guarded("episode")
    def episode_callback(self, msg: String) -> None:
        info = conv.episode_from_msg(msg)
        self._checked_instruction(info.instruction, "the episode's instruction")
        with self.lock:
            self.episode = info
            self.instruction = info.instruction.strip()
        self.try_lockstep_tick()

    @guarded("objects")
    def objects_callback(self, msg: MarkerArray) -> None:
        objects = conv.objects_from_msg(msg)
        with self.lock:
            self.objects = objects
            self.objects_stamp_ns = conv.stamp_to_ns(msg.markers[0].header.stamp) if msg.markers else -1
        self.try_lockstep_tick()

    # ------------------------------------------------------------ when to act
    def observation_complete(self, stamp_ns: int, tick: int) -> bool:
        """Lockstep: everything the command for `stamp_ns` depends on has arrived."""
        return self.joint_stamp_ns == stamp_ns

    def episode_for(self, stamp_ns: int) -> conv.EpisodeInfo | None:
        """The running episode that a stamp belongs to, or None."""
        info = self.episode
        if info is None or info.state != "running" or stamp_ns < info.start_ns:
            return None
        return info

    def try_lockstep_tick(self) -> None:
        if self.mode != "lockstep":
            return
        with self.lock:
            stamp = self._pending_ns
            if stamp is None:
                return
            info = self.episode_for(stamp)
            if info is None:
                # The sim publishes ticks only inside episodes: this tick's episode message
                # (transient-local, sent before the tick) is still on its way.
                return
            tick = info.tick_of(stamp)
            if not self.observation_complete(stamp, tick):
                return  # the rest of this tick's observation is still on its way
            self._pending_ns = None
            self._answered_ns = stamp
            self._act(stamp, info, tick)

    @guarded("/clock")
    def _note_clock(self, msg: Clock) -> None:
        now = conv.stamp_to_ns(msg.clock)
        with self.lock:
            if 0 <= now < self._clock_ns - CLOCK_RESET_NS:
                self._follow_clock_back(now)
            self._clock_ns = now

    def _follow_clock_back(self, now: int) -> None:
        """Sim time went back by more than CLOCK_RESET_NS (lock held): a new sim_node started
        its clock again (sim_node restarted). Forget everything stamped in the old timeline, so
        the new sim's ticks, joint states and episodes are not taken for old ones; the command
        publishers stay, and the next episode starts afresh (on_clock_reset for subclasses)."""
        rejections(self).reject("/clock", f"sim time jumped back from {self._clock_ns * 1e-9:.2f} s to "
                                          f"{now * 1e-9:.2f} s (sim_node restarted?); following it")
        self._last_tick_index = None
        self._due_ns = self._pending_ns = None
        self._answered_ns = -1
        self.joint_stamp_ns = -1
        self._active_episode = None
        self._tick_in.clear()
        if self.episode is not None and self.episode.start_ns > now + CLOCK_RESET_NS:
            self.episode = None  # the old sim's; the new one's (transient local) is on its way
        self.on_clock_reset(now)

    def on_clock_reset(self, now_ns: int) -> None:
        """Called (lock held) after sim time went back: drop what the subclass keeps by stamp."""

    @guarded("/clock")
    def clock_tick_callback(self, msg: Clock) -> None:
        """One control tick per crossed multiple of the control period of sim time; ticks the
        clock jumped over are counted as missed (their commands were never due on time).

        sim_node publishes /clock first and then the tick's observation, so the tick acts
        once the joint state of that tick is here (joint_state_callback), or at the next
        /clock at the latest: a command never leaves before its tick, nor a clock step late."""
        now = conv.stamp_to_ns(msg.clock)
        with self.lock:
            self._tick_in[now] = time.time_ns()
            if len(self._tick_in) > 8:
                del self._tick_in[min(self._tick_in)]
            if 0 <= now < self._clock_ns - CLOCK_RESET_NS:
                self._follow_clock_back(now)
            self._clock_ns = now
            due = self._due_ns
            if due is not None:  # the last tick's joint state never came: act on what is here
                self._due_ns = None
                self.control_timer_callback(due)
            index = now * self.control_rate // 1_000_000_000
            last = self._last_tick_index
            if last is not None and index <= last:
                return
            if last is not None and last + 1 < index <= last + self.control_rate:
                self.missed_ticks += index - last - 1  # (a jump of more than a second is not "missed")
            self._last_tick_index = index
            if self.joint_stamp_ns >= now:
                self.control_timer_callback(now)
            else:
                self._due_ns = now

    @guarded("control tick")
    def control_timer_callback(self, now: int | None = None) -> None:
        if now is None:
            now = self.get_clock().now().nanoseconds
        if now <= 0:
            return  # no /clock yet
        with self.lock:
            info = self.episode_for(now)
            tick = info.tick_of(now) if info is not None else -1
            self._act(now, info, tick)

    def _act(self, stamp_ns: int, info: conv.EpisodeInfo | None, tick: int) -> None:
        command = None
        if info is not None and self.joint_positions is not None:
            if self._active_episode != info.episode:
                self._active_episode = info.episode
                self.answer_timing.end_episode()
                self.on_new_episode(info)
            command = self.compute_command(stamp_ns, tick)
        if command is None and self.mode == "lockstep":
            command = self.hold_command()
        if command is not None:
            self.publish_command(*command)
            joint = self._joint_in
            if self.mode == "realtime" and joint is not None and joint[0] == stamp_ns:
                self.answer_timing.answered(stamp_ns, self._tick_in.get(stamp_ns), joint[1], time.time_ns())

    def hold_command(self) -> tuple[np.ndarray, float] | None:
        """Hold the last command, else the measured pose."""
        if self.last_command is not None:
            return self.last_command
        if self.joint_positions is None:
            return None
        return self.joint_positions[:7].copy(), float(self.joint_positions[7])

    def publish_command(self, arm: np.ndarray, gripper: float) -> None:
        """Publish a command, the last line of defence: a non-finite command is never sent
        (counted, warned about; the arm keeps the last one), an out-of-limit one is clamped
        to the joint limits first (the sim would clamp it the same way) with a warning."""
        arm = np.asarray(arm, dtype=np.float64)
        gripper = float(gripper)
        if arm.shape != (7,) or not np.all(np.isfinite(arm)) or not np.isfinite(gripper):
            self.rejected_commands += 1
            rejections(self).reject("own command", f"arm {arm.tolist()} gripper {gripper} is not 7 + 1 finite "
                                                   "values; not published, holding the last command")
            return
        clamped = np.clip(arm, ARM_LOWER, ARM_UPPER)
        clamped_gripper = float(np.clip(gripper, *GRIPPER_RANGE))
        if np.any(clamped != arm) or clamped_gripper != gripper:
            rejections(self).reject("own command limits", f"arm {arm.tolist()} gripper {gripper} outside the joint "
                                                          "limits; clamped")
        arm, gripper = clamped, clamped_gripper
        self.last_command = (arm, gripper)
        # Gripper first: the sim counts an arm command as the end of the tick's pair in logs.
        self.gripper_pub.publish(conv.float_array_msg([gripper]))
        self.arm_pub.publish(conv.float_array_msg(arm))
        self.commands_published += 1

    # ------------------------------------------------------------ what is missing
    def waiting_for(self) -> list[str]:
        """What the node needs and has not received (subclasses add their own inputs)."""
        missing = []
        sim_time = bool(self.get_parameter("use_sim_time").value)
        if sim_time and self._clock_ns < 0:
            missing.append(f"{self.resolve_topic_name('/clock')} (sim time: is sim_node running in this "
                           "namespace and ROS domain?)")
        if self.joint_positions is None:
            missing.append(f"joint states on {self.resolve_topic_name('joint_states')}")
        elif not sim_time and self.mode == "realtime":
            offset = self.get_clock().now().nanoseconds - self.joint_stamp_ns
            if abs(offset) > 5e9:
                missing.append(f"a clock that agrees with joint_states: they are stamped {offset * 1e-9:.0f} s from "
                               "this node's clock (use_sim_time is false; sim_node stamps sim time)")
        if self.episode is None:
            missing.append(f"an episode on {self.resolve_topic_name('episode')}")
        elif self.instruction is None:
            missing.append(f"an instruction on {self.resolve_topic_name('task')}")
        if self.uses_objects and self.objects is None:
            missing.append(f"object markers on {self.resolve_topic_name('objects')}")
        return missing

    def report_waiting(self) -> None:
        """Every WAIT_REPORT_S wall seconds: log what is still missing (nothing when all is here)."""
        with self.lock:
            missing = self.waiting_for()
        reported = self._reported_waiting
        if missing and not reported:
            self.get_logger().warning("waiting for " + "; ".join(missing))
        elif missing:
            self.get_logger().info("still waiting for " + "; ".join(missing))
        elif reported:
            self.get_logger().info("all inputs here: " + "; ".join(reported) + " arrived")
        self.waiting = self._reported_waiting = missing

    def diagnostic_values(self) -> dict[str, str]:
        return {
            "waiting_for": "; ".join(self.waiting) or "nothing",
            "commands": str(self.commands_published),
            "missed_ticks": str(self.missed_ticks),
            "rejected_messages": str(rejections(self).total),
            "rejected_commands": str(self.rejected_commands),
        }

    def publish_controller_diagnostics(self) -> None:
        with self.lock:
            self.waiting = self.waiting_for()
            values = {**self.diagnostic_values(), **(self.answer_timing.values() if self.mode == "realtime" else {})}
        level = DiagnosticStatus.WARN if self.waiting else DiagnosticStatus.OK
        status = DiagnosticStatus(level=level, name=f"{self.get_name()}: control",
                                  message=("waiting for " + "; ".join(self.waiting)) if self.waiting else "ok",
                                  hardware_id="arm_act", values=[KeyValue(key=k, value=v) for k, v in values.items()])
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diag_pub.publish(array)

    # ------------------------------------------------------------ subclass hooks
    def on_new_episode(self, info: conv.EpisodeInfo) -> None:
        """Called once, at the first tick of each new episode."""

    @abstractmethod
    def compute_command(self, stamp_ns: int, tick: int) -> tuple[np.ndarray, float] | None:
        """(arm (7,), gripper opening) for the tick, or None to publish nothing."""
