"""The live run in Rerun: a node that logs every live topic as it arrives (`arm-act demo --viewer rerun`).

RerunBridge subscribes to what sim_node, the controllers and policy_node publish and hands each
message to a RunLogger at the node's sim time (use_sim_time: the /clock the other nodes run
on), the same timeline a replay of the recorded bag uses. It runs in the demo's own process,
beside the episode printer, so the viewer costs the sim and policy processes only CPU time.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float32MultiArray, Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory
from visualization_msgs.msg import MarkerArray

from arm_act.ros import conversions as conv
from arm_act.ros.qos import SENSOR_DATA, TRANSIENT_LOCAL
from arm_act.view import layout as L
from arm_act.view.logger import RunLogger
from arm_act.view.sinks import WebViewer, open_recording

DEFAULT_SAVE = Path("arm_act_demo.rrd")


def live_topics(cameras=L.CAMERAS) -> list[tuple[str, type, object]]:
    """(relative topic, message type, QoS) of everything the viewer shows."""
    topics = [(f"camera/{c}/image_raw", Image, SENSOR_DATA) for c in cameras]
    topics += [
        ("joint_states", JointState, SENSOR_DATA),
        ("objects", MarkerArray, 10),
        ("task", String, TRANSIENT_LOCAL),
        ("episode", String, TRANSIENT_LOCAL),
        (conv.ARM_COMMAND_TOPIC, Float64MultiArray, 10),
        (conv.GRIPPER_COMMAND_TOPIC, Float64MultiArray, 10),
        ("policy/attention", Float32MultiArray, 10),
        ("policy/instruction_attention", Float32MultiArray, 10),
        ("policy/action_chunk", JointTrajectory, 10),
        ("policy/diagnostics", DiagnosticArray, 10),
    ]
    return topics


# Live, `objects` is shown at most this often (sim time). sim_node publishes it every control
# tick, and turning one MarkerArray into Python objects costs rclpy 2-3 ms here (measured):
# 50 Hz of that was a sixth of a core, and the blocks move slowly. Bags keep every message,
# and replays show every one.
OBJECTS_PERIOD_NS = 100_000_000


class RerunBridge(Node):
    """Logs the live topics into a Rerun recording; messages before the first /clock are dropped."""

    def __init__(self, rec, cameras=L.CAMERAS, context=None):
        super().__init__("rerun_bridge", context=context,
                         parameter_overrides=[Parameter("use_sim_time", value=True)])
        self.run = RunLogger(rec, cameras)
        self._lock = threading.Lock()
        self.callback_s = 0.0  # wall time spent logging, for the overhead figures
        self.messages = 0
        self._objects_ns = -OBJECTS_PERIOD_NS
        for topic, msgtype, qos in live_topics(cameras):
            if msgtype is MarkerArray:  # raw bytes: decoded only when shown (OBJECTS_PERIOD_NS)
                self.create_subscription(msgtype, topic, lambda raw, t=topic: self.objects_callback(t, raw), qos,
                                         raw=True)
            else:
                self.create_subscription(msgtype, topic, lambda msg, t=topic: self.message_callback(t, msg), qos)

    def objects_callback(self, topic: str, raw: bytes) -> None:
        now = self.get_clock().now().nanoseconds
        if now - self._objects_ns >= OBJECTS_PERIOD_NS:
            self._objects_ns = now
            self.message_callback(topic, deserialize_message(raw, MarkerArray))

    def message_callback(self, topic: str, msg) -> None:
        now = self.get_clock().now().nanoseconds
        if now == 0:  # no /clock yet
            return
        start = time.perf_counter()
        with self._lock:
            if self.run.handle(topic, now, msg):
                self.messages += 1
        self.callback_s += time.perf_counter() - start

    def close(self) -> None:
        """Send what is buffered (the node stays; destroy_node() removes it)."""
        with self._lock:
            self.run.close()


class LiveRerun:
    """The demo's Rerun output: a recording into `save` (.rrd), the web viewer on
    127.0.0.1:`port` (web), or a native viewer when a display exists and neither is asked for;
    without a display and neither, into arm_act_demo.rrd; `attention`: the camera tab shown
    first (arm_act.view.layout.ATTENTION_TABS). The bridge node spins on its own
    executor thread (context: the rclpy context, already initialised), so the demo's other
    callbacks never wait behind it, nor it behind them."""

    def __init__(self, save: Path | None = None, web: bool = False, port: int | None = None,
                 cameras=L.CAMERAS, context=None, attention: str = "queries"):
        spawn = save is None and not web and bool(os.environ.get("DISPLAY"))
        if save is None and not web and not spawn:
            save = DEFAULT_SAVE
        self.save = save
        self.server = WebViewer(port or 0) if web else None
        self.url = self.server.url if self.server else None
        try:
            self.rec = open_recording("arm-act demo (live)", save=save, web=self.server, spawn=spawn, cameras=cameras,
                                      attention=attention)
            self.node = RerunBridge(self.rec, cameras, context=context)
        except Exception:
            if self.server is not None:
                self.server.close()
            raise
        self._executor = SingleThreadedExecutor(context=context)
        self._executor.add_node(self.node)
        self.thread_cpu_s = 0.0  # CPU time of the bridge's thread (message decoding and logging)
        self._thread = threading.Thread(target=self._spin, name="rerun_bridge", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            self._executor.spin()
        finally:
            self.thread_cpu_s = time.thread_time()

    def close(self) -> None:
        """Stop the bridge, flush and end the recording (the .rrd is complete after this);
        the web viewer stays up."""
        self._executor.shutdown(timeout_sec=2.0)
        self._thread.join(timeout=5.0)  # before rclpy shuts down (as the demo's own spinner)
        self.node.close()
        self.node.destroy_node()
        self.rec.disconnect()

    def serve_until_interrupted(self) -> None:
        """Keep the web viewer up (the recording stays browsable) until Ctrl-C."""
        if self.server is None:
            return
        try:
            while self.server.process.poll() is None:
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.close()
