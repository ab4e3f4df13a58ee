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
from rclpy.node import Node
from rclpy.parameter import Parameter
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
        ("policy/action_chunk", JointTrajectory, 10),
        ("policy/diagnostics", DiagnosticArray, 10),
    ]
    return topics


class RerunBridge(Node):
    """Logs the live topics into a Rerun recording; messages before the first /clock are dropped."""

    def __init__(self, rec, cameras=L.CAMERAS, context=None):
        super().__init__("rerun_bridge", context=context,
                         parameter_overrides=[Parameter("use_sim_time", value=True)])
        self.run = RunLogger(rec, cameras)
        self._lock = threading.Lock()
        self.callback_s = 0.0  # wall time spent logging, for the overhead figures
        self.messages = 0
        for topic, msgtype, qos in live_topics(cameras):
            self.create_subscription(msgtype, topic, lambda msg, t=topic: self.message_callback(t, msg), qos)

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
    without a display and neither, into arm_act_demo.rrd. `node` goes into the demo's executor."""

    def __init__(self, save: Path | None = None, web: bool = False, port: int | None = None,
                 cameras=L.CAMERAS, context=None):
        spawn = save is None and not web and bool(os.environ.get("DISPLAY"))
        if save is None and not web and not spawn:
            save = DEFAULT_SAVE
        self.save = save
        self.server = WebViewer(port or 0) if web else None
        self.url = self.server.url if self.server else None
        try:
            self.rec = open_recording("arm-act demo (live)", save=save, web=self.server, spawn=spawn, cameras=cameras)
            self.node = RerunBridge(self.rec, cameras, context=context)
        except Exception:
            if self.server is not None:
                self.server.close()
            raise

    def close(self) -> None:
        """Flush and end the recording (the .rrd is complete after this); the web viewer stays."""
        self.node.close()
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
