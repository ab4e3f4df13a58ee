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
from abc import ABC, abstractmethod

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from visualization_msgs.msg import MarkerArray

from arm_act.ros import conversions as conv

TRANSIENT_LOCAL = QoSProfile(
    depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE
)


class ControllerNode(Node, ABC):
    """Base class; subclasses implement `compute_command(stamp_ns, tick)` and may extend
    `observation_complete` and `on_new_episode`."""

    # Whether the controller reads the ground-truth object markers (the expert does; a
    # policy must not, and skipping the 50 Hz MarkerArray conversions saves its CPU).
    uses_objects = False

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

        self.arm_pub = self.create_publisher(Float64MultiArray, conv.ARM_COMMAND_TOPIC, 10)
        self.gripper_pub = self.create_publisher(Float64MultiArray, conv.GRIPPER_COMMAND_TOPIC, 10)
        self.create_subscription(JointState, "joint_states", self.joint_state_callback, 10)
        self.create_subscription(String, "task", self.task_callback, TRANSIENT_LOCAL)
        self.create_subscription(String, "episode", self.episode_callback, TRANSIENT_LOCAL)
        if self.uses_objects:
            self.create_subscription(MarkerArray, "objects", self.objects_callback, 10)
        self.missed_ticks = 0
        self._last_tick_index: int | None = None
        if self.mode == "realtime":
            # The control "timer" on sim time is driven by /clock itself: rclpy's own timers
            # on sim time fired at 17-44 Hz instead of 50 Hz beside a 100 Hz /clock here
            # (measured), so a tick runs whenever the clock crosses the next multiple of the
            # control period. Without sim time: a timer. The nodes spin on a
            # SingleThreadedExecutor (arm_act.ros.node_main), where the callback group changes
            # nothing: the tick runs between the other callbacks, each of them short
            # (docs/architecture.md, "Threading").
            group = MutuallyExclusiveCallbackGroup()
            if self.get_parameter("use_sim_time").value:
                self.create_subscription(Clock, "/clock", self.clock_tick_callback, 10, callback_group=group)
            else:
                self.create_timer(1.0 / self.control_rate, self.control_timer_callback, callback_group=group)

    # ------------------------------------------------------------ observation input
    def joint_state_callback(self, msg: JointState) -> None:
        try:
            positions = conv.joint_positions_from_msg(msg)
        except conv.ConversionError as exc:
            self.get_logger().warning(f"ignored joint_states: {exc}", throttle_duration_sec=2.0)
            return
        stamp = conv.stamp_to_ns(msg.header.stamp)
        with self.lock:
            self.joint_positions, self.joint_stamp_ns = positions, stamp
            if self.mode == "lockstep" and stamp > self._answered_ns:
                self._pending_ns = stamp
        self.try_lockstep_tick()

    def task_callback(self, msg: String) -> None:
        with self.lock:
            self.instruction = msg.data

    def episode_callback(self, msg: String) -> None:
        try:
            info = conv.episode_from_msg(msg)
        except conv.ConversionError as exc:
            self.get_logger().warning(f"ignored episode message: {exc}")
            return
        with self.lock:
            self.episode = info
            self.instruction = info.instruction
        self.try_lockstep_tick()

    def objects_callback(self, msg: MarkerArray) -> None:
        try:
            objects = conv.objects_from_msg(msg)
        except conv.ConversionError as exc:
            self.get_logger().warning(f"ignored objects: {exc}", throttle_duration_sec=2.0)
            return
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

    def clock_tick_callback(self, msg: Clock) -> None:
        """One control tick per crossed multiple of the control period of sim time; ticks the
        clock jumped over are counted as missed (their commands were never due on time)."""
        now = conv.stamp_to_ns(msg.clock)
        index = now * self.control_rate // 1_000_000_000
        last = self._last_tick_index
        if last is not None and index <= last:
            return
        if last is not None and index > last + 1:
            self.missed_ticks += index - last - 1
        self._last_tick_index = index
        self.control_timer_callback(now)

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
                self.on_new_episode(info)
            command = self.compute_command(stamp_ns, tick)
        if command is None and self.mode == "lockstep":
            command = self.hold_command()
        if command is not None:
            self.publish_command(*command)

    def hold_command(self) -> tuple[np.ndarray, float] | None:
        """Hold the last command, else the measured pose."""
        if self.last_command is not None:
            return self.last_command
        if self.joint_positions is None:
            return None
        return self.joint_positions[:7].copy(), float(self.joint_positions[7])

    def publish_command(self, arm: np.ndarray, gripper: float) -> None:
        self.last_command = (np.asarray(arm, dtype=np.float64), float(gripper))
        # Gripper first: the sim counts an arm command as the end of the tick's pair in logs.
        self.gripper_pub.publish(conv.float_array_msg([gripper]))
        self.arm_pub.publish(conv.float_array_msg(arm))
        self.commands_published += 1

    # ------------------------------------------------------------ subclass hooks
    def on_new_episode(self, info: conv.EpisodeInfo) -> None:
        """Called once, at the first tick of each new episode."""

    @abstractmethod
    def compute_command(self, stamp_ns: int, tick: int) -> tuple[np.ndarray, float] | None:
        """(arm (7,), gripper opening) for the tick, or None to publish nothing."""
