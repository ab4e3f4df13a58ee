"""bag_recorder: records the live topics into a rosbag2 MCAP bag (the `ros2 bag record` of
this package, which has no rosbag2 when it runs from wheels).

Parameters:
  topics          topic names (relative names resolve in the node's namespace); default:
                  everything sim, controllers and policy publish (arm_act.bags.live_topic_types)
  bag_path        output directory, must not exist; default rosbag2_<date>-<time> like ros2 bag
  compression     "" or "zstd" (MCAP chunk compression)
  flush_interval  wall seconds between flushes: what a hard kill can lose at most
  discovery_interval  wall seconds between graph lookups for topics of unknown type

Timestamps are the node clock at receipt, i.e. sim time: main() turns use_sim_time on
unless the command line sets it. Messages arrive as raw CDR (raw=True subscriptions: no
rclpy deserialization) and are stored in canonical form (arm_act.bags.codec). Sensor topics
are subscribed best-effort (sensor-data QoS), `task` and `episode` transient-local, the rest
reliable; each topic's metadata records the QoS its publishers offer, as rosbag2 does.
custom_data gets the episode seeds and outcomes seen on the `episode` topic and the
software version. SIGINT/SIGTERM close the bag cleanly; after SIGKILL, arm_act.bags.repair
recovers everything up to the last flush.
"""
from __future__ import annotations

import functools
import importlib
import json
import signal
import sys
import threading
import time

import rclpy
from rclpy.clock import Clock, ClockType
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions

from arm_act.bags import (
    COMPRESSIONS,
    LATCHED_TOPICS,
    SENSOR_TOPIC_TYPES,
    BagError,
    BagWriter,
    TopicSpec,
    decode_cdr,
    live_topic_types,
    to_rosbags_qos,
)

DEFAULT_TOPICS = list(live_topic_types())
# Sensor data is best effort (qos_profile_sensor_data) but with a deeper queue than its 5,
# so a flush or a burst of camera frames does not drop joint states.
SENSOR_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=50, reliability=ReliabilityPolicy.BEST_EFFORT,
                        durability=DurabilityPolicy.VOLATILE)
LATCHED_SUBSCRIPTION_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                                      reliability=ReliabilityPolicy.RELIABLE,
                                      durability=DurabilityPolicy.TRANSIENT_LOCAL)
RELIABLE_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100, reliability=ReliabilityPolicy.RELIABLE,
                          durability=DurabilityPolicy.VOLATILE)


def message_class(msgtype: str):
    """'sensor_msgs/msg/Image' -> the rclpy message class."""
    package, _, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


def known_type(name: str) -> str | None:
    """The type of a live topic (by relative name), also for cameras with other names."""
    types = live_topic_types()
    if name in types:
        return types[name]
    if name.startswith("camera/") and name.endswith("/image_raw"):
        return "sensor_msgs/msg/Image"
    if name.startswith("camera/") and name.endswith("/camera_info"):
        return "sensor_msgs/msg/CameraInfo"
    return None


class BagRecorder(Node):
    def __init__(self, **kwargs):
        super().__init__("bag_recorder", **kwargs)
        self.declare_parameter("topics", DEFAULT_TOPICS)
        self.declare_parameter("bag_path", "")
        self.declare_parameter("compression", "")
        self.declare_parameter("flush_interval", 1.0)
        self.declare_parameter("discovery_interval", 0.5)

        def param(name):
            return self.get_parameter(name).value

        compression = str(param("compression")) or None
        if compression not in COMPRESSIONS:
            raise BagError(f"compression={compression!r} must be '' or 'zstd'")
        # Resolve every name before the bag exists, so a bad name leaves no bag behind.
        plan = {self.resolve_topic_name(name): name for name in param("topics")}
        self.failed: BagError | None = None
        self.episodes: dict[int, dict] = {}  # episode id -> its latest status JSON
        self.recorded_subscriptions: dict[str, object] = {}
        self._pending: list[str] = []  # topics waiting for a publisher to show their type
        self._episode_topic = self.resolve_topic_name("episode")
        path = str(param("bag_path")) or time.strftime("rosbag2_%Y_%m_%d-%H_%M_%S")
        self.writer = BagWriter(path, (), {}, compression, flush_interval_s=float(param("flush_interval")))
        steady = Clock(clock_type=ClockType.STEADY_TIME)  # flushing must not stop with sim time
        self.create_timer(float(param("flush_interval")), self.flush_callback, clock=steady)
        for topic, name in plan.items():
            msgtype = known_type(name if name == "/clock" else name.lstrip("/"))
            if msgtype is None:
                self._pending.append(topic)
            else:
                self._subscribe(topic, msgtype, self._subscription_qos(name, msgtype))
        if self._pending:
            self.create_timer(float(param("discovery_interval")), self.discovery_callback, clock=steady)
        self.get_logger().info(
            f"recording {len(self.recorded_subscriptions) + len(self._pending)} topics into {self.writer.path}")

    @staticmethod
    def _subscription_qos(name: str, msgtype: str) -> QoSProfile:
        if msgtype in SENSOR_TOPIC_TYPES:
            return SENSOR_QOS
        if name.lstrip("/") in LATCHED_TOPICS:
            return LATCHED_SUBSCRIPTION_QOS
        return RELIABLE_QOS

    def _subscribe(self, topic: str, msgtype: str, qos: QoSProfile) -> None:
        callback = functools.partial(self.message_callback, topic, msgtype)
        self.recorded_subscriptions[topic] = self.create_subscription(
            message_class(msgtype), topic, callback, qos, raw=True)

    def discovery_callback(self) -> None:
        """Subscribe to configured topics of unknown type once a publisher shows the type,
        with QoS adapted to what the publishers offer (as rosbag2 does)."""
        for topic in list(self._pending):
            publishers = self.get_publishers_info_by_topic(topic)
            types = {info.topic_type for info in publishers}
            if len(types) != 1:
                if len(types) > 1:
                    self.get_logger().warning(f"{topic}: publishers disagree on the type {sorted(types)}")
                continue
            offered = [info.qos_profile for info in publishers]
            reliable = all(q.reliability == ReliabilityPolicy.RELIABLE for q in offered)
            latched = all(q.durability == DurabilityPolicy.TRANSIENT_LOCAL for q in offered)
            qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100,
                             reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)
            self._subscribe(topic, types.pop(), qos)
            self._pending.remove(topic)
            self.get_logger().info(f"{topic}: publisher found, recording")

    def message_callback(self, topic: str, msgtype: str, raw: bytes) -> None:
        if self.failed is not None:
            return
        stamp = self.get_clock().now().nanoseconds
        try:
            if topic not in self.writer.topics:
                offered = tuple(to_rosbags_qos(i.qos_profile) for i in self.get_publishers_info_by_topic(topic))
                self.writer.add_topic(TopicSpec(topic, msgtype, offered))
            self.writer.write(topic, stamp, raw)
        except BagError as exc:
            self.failed = exc
            self.get_logger().error(f"recording stopped: {exc}")
            return
        if topic == self._episode_topic:
            self._note_episode(raw)

    def _note_episode(self, raw: bytes) -> None:
        try:
            status = json.loads(decode_cdr(raw, "std_msgs/msg/String").data)
            self.episodes[int(status["episode"])] = status
        except (ValueError, KeyError, TypeError, BagError) as exc:
            self.get_logger().warning(f"episode message is not the documented JSON: {exc}")
            return
        ordered = [self.episodes[k] for k in sorted(self.episodes)]
        self.writer.set_metadata("episode_seeds", [e.get("seed") for e in ordered])
        self.writer.set_metadata("episodes", [
            {k: e.get(k) for k in ("episode", "seed", "n_blocks", "state", "instruction", "time")} for e in ordered])

    def flush_callback(self) -> None:
        if self.failed is None and not self.writer.closed:
            try:
                self.writer.flush()
            except BagError as exc:
                self.failed = exc
                self.get_logger().error(f"recording stopped: {exc}")

    def close(self) -> None:
        """Close the bag (summary, metadata.yaml); a failed bag stays marked incomplete."""
        if self.failed is None and not self.writer.closed:
            try:
                self.writer.close()
            except BagError as exc:
                self.failed = exc
                self.get_logger().error(f"closing the bag failed: {exc}")
                return
            self.get_logger().info(f"closed {self.writer.path}: {self.writer.message_count} messages")


def main(args=None) -> int:
    argv = list(sys.argv if args is None else args)
    # Sim time unless the command line says otherwise (later --ros-args values win).
    argv[1:1] = ["--ros-args", "-p", "use_sim_time:=true", "--"]
    # rclpy's own handlers would raise KeyboardInterrupt wherever the main thread is, possibly
    # inside a half-written chunk; ours only ask the spin loop to stop, then the bag closes.
    rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    recorder = None
    code = 0
    try:
        recorder = BagRecorder()
        executor = SingleThreadedExecutor()
        executor.add_node(recorder)
        while not stop.is_set() and recorder.failed is None and rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
    except BagError as exc:
        print(f"bag_recorder: {exc}", file=sys.stderr)
        code = 1
    finally:
        if recorder is not None:
            recorder.close()
            code = 1 if recorder.failed is not None else code
            recorder.destroy_node()
        rclpy.try_shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


if __name__ == "__main__":
    sys.exit(main())
