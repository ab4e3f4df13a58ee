"""bag_recorder: records the live topics into a rosbag2 MCAP bag (the `ros2 bag record` of
this package, which has no rosbag2 when it runs from wheels).

Parameters:
  topics          topic names (relative names resolve in the node's namespace); default:
                  everything sim, controllers and policy publish (arm_act.bags.live_topic_types)
  bag_path        output directory, must not exist; default rosbag2_<date>-<time> like ros2 bag
  compression     "" or "zstd" (MCAP chunk compression)
  flush_interval  wall seconds between flushes: what a hard kill can lose at most
  discovery_interval  wall seconds between graph lookups for topics of unknown type

Matching report: on ~/publishers_matched (std_msgs/String, transient-local) the recorder says,
as JSON {topic: count}, how many publishers each of its subscriptions has matched
(Subscription.get_publisher_count(), the reader's own side of DDS discovery), checked every
MATCH_REPORT_S and sent whenever a count changes. sim_node's wait_for_recorder compares it
with the publishers its graph knows: the graph of one participant shows a controller's
command writer before the recorder's reader has matched it, and what that writer sends
before then is not recorded.

Timestamps are sim time: main() turns use_sim_time on unless the command line sets it. A
message is stamped with the sim time at which it was sent: that of the newest /clock message
sent before it, by the DDS source timestamps of both (the sender's wall clock at publication).
Not the node clock when the executor gets round to the message: at start-up, or whenever the
executor falls behind, that clock has moved on and messages were stamped up to hundreds of ms
late. Nor the reception time: each DDS reader of this process timestamps its own receptions,
and between readers the order is not kept (a command of tick t, received after the /clock of
t+1 that it caused, read one step late). Messages wait in memory until a /clock sent after
them has arrived (at most STAMP_WAIT_S wall seconds after they were taken; then the newest
clock known is used). Across machines the hosts' clocks must agree (NTP), as for any header
stamp; on one machine (the default discovery range) they are the same clock.

Messages arrive as raw CDR (raw=True subscriptions: no rclpy deserialization) and are stored
in canonical form (arm_act.bags.codec). Sensor topics are subscribed best-effort (sensor-data
QoS), `task` and `episode` transient-local, the rest reliable; each topic's metadata records
the QoS its publishers offer, as rosbag2 does. custom_data gets the episode seeds and
outcomes seen on the `episode` topic and the software version. SIGINT/SIGTERM close the bag
cleanly; after SIGKILL, arm_act.bags.repair recovers everything up to the last flush.
"""
from __future__ import annotations

import bisect
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
from rosgraph_msgs.msg import Clock as ClockMsg
from std_msgs.msg import String

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
from arm_act.nodes.guard import guard_time_source, guarded
from arm_act.ros.conversions import RECORDER_MATCHES_TOPIC, ConversionError
from arm_act.ros.node_main import dds_defaults
from arm_act.ros.qos import TRANSIENT_LOCAL

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
CLOCK_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=500, reliability=ReliabilityPolicy.BEST_EFFORT,
                       durability=DurabilityPolicy.VOLATILE)
# Wall seconds a received message may wait for the next /clock before it is stamped anyway.
STAMP_WAIT_S = 0.25
# Wall seconds of /clock reception history kept for stamping.
CLOCK_HISTORY_S = 10.0
# Wall seconds between looks at how many publishers each subscription has matched.
MATCH_REPORT_S = 0.1


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


def _sent_ns(info) -> int:
    """When a message was published (DDS source timestamp, wall ns); its reception time, or
    now, where the middleware gives none."""
    return int(info.get("source_timestamp") or 0) or int(info.get("received_timestamp") or 0) or time.time_ns()


class BagRecorder(Node):
    def __init__(self, **kwargs):
        super().__init__("bag_recorder", **kwargs)
        guard_time_source(self)
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
        # /clock as received: wall reception times (ns) and the sim times they carried.
        self._clock_received: list[int] = []
        self._clock_sim: list[int] = []
        # Received messages not yet stamped: (reception wall ns, order, topic, msgtype, raw).
        self._unstamped: list[tuple[int, int, str, str, bytes]] = []
        self._order = 0
        self.recorded_subscriptions: dict[str, object] = {}
        self._pending: list[str] = []  # topics waiting for a publisher to show their type
        self._episode_topic = self.resolve_topic_name("episode")
        path = str(param("bag_path")) or time.strftime("rosbag2_%Y_%m_%d-%H_%M_%S")
        if not str(param("bag_path")) and self.get_namespace() != "/":  # two namespaces, one second
            path += "_" + self.get_namespace().strip("/").replace("/", "_")
        self.writer = BagWriter(path, (), {}, compression, flush_interval_s=float(param("flush_interval")))
        steady = Clock(clock_type=ClockType.STEADY_TIME)  # flushing must not stop with sim time
        self.create_timer(float(param("flush_interval")), self.flush_callback, clock=steady)
        self.create_timer(STAMP_WAIT_S / 2, self.stamp_callback, clock=steady)
        # Best effort, like the recorded sensor topics: a reliable reader's reception time can be
        # that of a repair (resent sample), hundreds of ms after the data subscriptions saw the
        # messages that followed it (measured on a loaded machine).
        self._clock_sub = self.create_subscription(ClockMsg, "/clock", self.clock_callback, CLOCK_QOS)
        for topic, name in plan.items():
            msgtype = known_type(name if name == "/clock" else name.lstrip("/"))
            if msgtype is None:
                self._pending.append(topic)
            else:
                self._subscribe(topic, msgtype, self._subscription_qos(name, msgtype))
        if self._pending:
            self.create_timer(float(param("discovery_interval")), self.discovery_callback, clock=steady)
        self._matches_pub = self.create_publisher(String, "~/" + RECORDER_MATCHES_TOPIC, TRANSIENT_LOCAL)
        self._matches_sent: dict[str, int] | None = None
        self.create_timer(MATCH_REPORT_S, self.report_matches, clock=steady)
        self.report_matches()
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

    def matched_publishers(self) -> dict[str, int]:
        """{topic: how many publishers its subscription has matched} of the topics subscribed so far."""
        return {topic: sub.get_publisher_count() for topic, sub in self.recorded_subscriptions.items()}

    def report_matches(self) -> None:
        """Send the matching report (module docstring) when it changed."""
        matched = self.matched_publishers()
        if matched != self._matches_sent:
            self._matches_pub.publish(String(data=json.dumps(matched, sort_keys=True)))
            self._matches_sent = matched

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

    @guarded("/clock")
    def clock_callback(self, msg: ClockMsg, info) -> None:
        """Remember when each /clock message arrived (DDS reception time) and what it said.
        Takes every /clock message already waiting, too: the executor serves one message per
        subscription and round, and while it is behind (at start-up) the clock history would
        trail the data it is needed for."""
        self._note_clock(msg, info)
        take = getattr(getattr(self._clock_sub, "handle", None), "take_message", None)
        for _ in range(1000 if take is not None else 0):
            try:
                with self._clock_sub.handle:
                    taken = take(ClockMsg, False)
            except Exception:  # noqa: BLE001 - rclpy internals changed: the executor delivers the rest
                break
            if not taken or taken[0] is None:
                break
            self._note_clock(*taken)
        self._stamp_ready()

    def _note_clock(self, msg: ClockMsg, info) -> None:
        received = _sent_ns(info)
        sim = int(msg.clock.sec) * 1_000_000_000 + int(msg.clock.nanosec)
        if sim < 0:  # a bag stamp must not be negative: such a clock would end the recording
            raise ConversionError(f"/clock at {sim * 1e-9:.3f} s is negative; not used for stamps")
        if self._clock_received and received < self._clock_received[-1]:
            received = self._clock_received[-1]
        self._clock_received.append(received)
        self._clock_sim.append(sim)
        if len(self._clock_received) > 4096 and received - self._clock_received[0] > CLOCK_HISTORY_S * 1e9:
            cut = bisect.bisect_left(self._clock_received, received - int(CLOCK_HISTORY_S * 1e9))
            del self._clock_received[:cut], self._clock_sim[:cut]

    def sim_time_at(self, received_ns: int) -> int:
        """The sim time of the newest /clock received at or before `received_ns` (wall ns);
        before the first one, the first one's (nothing was sent earlier in sim time), and
        with no /clock at all, the node clock."""
        if not self._clock_received:
            return self.get_clock().now().nanoseconds
        index = bisect.bisect_right(self._clock_received, received_ns) - 1
        return self._clock_sim[max(index, 0)]

    @guarded("{0} message")
    def message_callback(self, topic: str, msgtype: str, raw: bytes, info) -> None:
        if self.failed is not None:
            return
        received = _sent_ns(info)
        self._unstamped.append((received, self._order, topic, msgtype, raw, time.monotonic()))
        self._order += 1
        self._stamp_ready()

    def stamp_callback(self) -> None:
        self._stamp_ready()

    def _stamp_ready(self, everything: bool = False) -> None:
        """Write the messages whose stamp is settled: a /clock received after them has been
        seen (the /clock subscription is taken in reception order, so every earlier one has
        been too), or they were taken STAMP_WAIT_S ago and no /clock came since (the sim
        stopped); with `everything`, all of them."""
        if not self._unstamped:
            return
        newest_clock = self._clock_received[-1] if self._clock_received else -1
        oldest_allowed = time.monotonic() - STAMP_WAIT_S
        self._unstamped.sort()
        ready = 0
        for received, _, _, _, _, taken in self._unstamped:
            if not (everything or received < newest_clock or taken <= oldest_allowed):
                break
            ready += 1
        batch, self._unstamped = self._unstamped[:ready], self._unstamped[ready:]
        for received, _, topic, msgtype, raw, _ in batch:
            self._write(topic, msgtype, self.sim_time_at(received), raw)

    def _write(self, topic: str, msgtype: str, stamp: int, raw: bytes) -> None:
        if self.failed is not None:
            return
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
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError, BagError) as exc:
            self.get_logger().warning(f"episode message is not the documented JSON: {exc}",
                                      throttle_duration_sec=5.0)
            return
        ordered = [self.episodes[k] for k in sorted(self.episodes)]
        self.writer.set_metadata("episode_seeds", [e.get("seed") for e in ordered])
        # An episode whose goal changed mid-episode also lists the changes (time, instruction).
        self.writer.set_metadata("episodes", [
            {**{k: e.get(k) for k in ("episode", "seed", "n_blocks", "state", "instruction", "time")},
             **({"goal_changes": e["goal_changes"]} if e.get("goal_changes") else {})} for e in ordered])

    def flush_callback(self) -> None:
        if self.failed is None and not self.writer.closed:
            try:
                self.writer.flush()
            except BagError as exc:
                self.failed = exc
                self.get_logger().error(f"recording stopped: {exc}")

    def close(self) -> None:
        """Close the bag (summary, metadata.yaml); a failed bag stays marked incomplete."""
        if not self.writer.closed:
            self._stamp_ready(everything=True)
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
    try:
        dds_defaults()
    except ValueError as exc:  # e.g. ARM_ACT_DDS_TRANSPORT=tcp: one line, not a traceback
        print(f"bag_recorder: {exc}", file=sys.stderr)
        return 1
    # rclpy's own handlers would raise KeyboardInterrupt wherever the main thread is, possibly
    # inside a half-written chunk; ours only ask the spin loop to stop, then the bag closes.
    # Any number of SIGINT/SIGTERM (launch and the terminal both send one) only set the flag.
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    recorder = None
    code = 0
    try:
        rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
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
        rclpy.try_shutdown(uninstall_handlers=False)  # none installed; see arm_act/ros/node_main.py run_node
        for sig, handler in previous.items():
            # Called in process: the caller's handlers back. A process on its way out ignores
            # them instead: Python's finalization would put SIG_DFL back, and the second SIGINT
            # of a process group would kill it while it unloads.
            signal.signal(sig, handler if args is not None else signal.SIG_IGN)
    return code


if __name__ == "__main__":
    sys.exit(main())
