"""The demo's viewer node and its outputs (a window when a display exists, else a video)."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float32MultiArray, Float64MultiArray, String

from arm_act.common.viz import JointStrip, VideoWriter, compose_frame
from arm_act.nodes.controller import TRANSIENT_LOCAL
from arm_act.nodes.guard import guarded
from arm_act.ros import conversions as conv
from arm_act.ros.qos import SENSOR_DATA

DEFAULT_VIDEO = Path("arm_act_demo.mp4")


class DemoViewer(Node):
    """Prints a line per finished episode and composes a view frame per camera pair."""

    def __init__(self, episodes: int, cameras=("front", "wrist"), compose: bool = True, **kwargs):
        """compose: make view frames (False: only the episode lines, e.g. for Rerun or no view);
        kwargs go to rclpy's Node (context=..., for tests)."""
        super().__init__("demo_viewer", **kwargs)
        self.cameras = cameras
        self.compose = compose
        self.episodes = episodes
        self.results: list[dict] = []
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._images: dict[str, tuple[int, np.ndarray]] = {}
        self._attention: dict[str, np.ndarray] | None = None
        self._gripper_cmd: float | None = None
        self._gripper: float | None = None
        self._info: conv.EpisodeInfo | None = None
        self._frame: np.ndarray | None = None
        self._frame_ready = threading.Event()
        self._strip = JointStrip()  # joints and gripper, actual vs commanded, under the cameras
        self._state_time = 0.0  # sim time of the latest joint state (commands carry no stamp)
        for camera in cameras:
            self.create_subscription(Image, f"camera/{camera}/image_raw",
                                     lambda m, c=camera: self.image_callback(c, m), SENSOR_DATA)
        self.create_subscription(Float32MultiArray, "policy/attention", self.attention_callback, 10)
        self.create_subscription(Float64MultiArray, conv.GRIPPER_COMMAND_TOPIC, self.gripper_callback, 10)
        self.create_subscription(Float64MultiArray, conv.ARM_COMMAND_TOPIC, self.arm_callback, 10)
        self.create_subscription(JointState, "joint_states", self.joint_state_callback, SENSOR_DATA)
        self.create_subscription(String, "episode", self.episode_callback, TRANSIENT_LOCAL)

    @guarded("{0} image")
    def image_callback(self, camera: str, msg: Image) -> None:
        if not self.compose:
            return
        try:
            rgb = np.array(conv.image_from_msg(msg))
        except conv.ConversionError:
            return
        stamp = conv.stamp_to_ns(msg.header.stamp)
        with self._lock:
            self._images[camera] = (stamp, rgb)
            if len({s for s, _ in self._images.values()}) == 1 and len(self._images) == len(self.cameras):
                info = self._info
                self._frame = compose_frame(
                    {c: self._images[c][1] for c in self.cameras}, self._attention,
                    info.instruction if info else "", info.state if info else "",
                    self._gripper_cmd, self._gripper,
                    (stamp - info.start_ns) * 1e-9 if info else stamp * 1e-9, strip=self._strip)
                self._frame_ready.set()

    @guarded("policy/attention")
    def attention_callback(self, msg: Float32MultiArray) -> None:
        try:
            grids = conv.attention_from_msg(msg)
        except conv.ConversionError:
            return
        with self._lock:
            self._attention = grids

    @guarded("gripper command")
    def gripper_callback(self, msg: Float64MultiArray) -> None:
        if len(msg.data) == 1 and np.isfinite(msg.data[0]):
            self._gripper_cmd = float(msg.data[0])
            self._strip.add_command(self._state_time, gripper=self._gripper_cmd)

    @guarded("arm command")
    def arm_callback(self, msg: Float64MultiArray) -> None:
        if len(msg.data) == conv.ARM_JOINTS and np.all(np.isfinite(msg.data)):
            self._strip.add_command(self._state_time, arm=np.asarray(msg.data))

    @guarded("joint_states")
    def joint_state_callback(self, msg: JointState) -> None:
        try:
            positions = conv.joint_positions_from_msg(msg)
        except conv.ConversionError:
            return
        self._gripper = float(positions[7])
        self._state_time = conv.stamp_to_sec(msg.header.stamp)
        self._strip.add_state(self._state_time, positions)

    @guarded("episode")
    def episode_callback(self, msg: String) -> None:
        try:
            info = conv.episode_from_msg(msg)
        except conv.ConversionError:
            return
        with self._lock:
            self._info = info
            if info.state == "running":
                self._attention = None
                return
        result = {"episode": info.episode, "seed": info.seed, "instruction": info.instruction,
                  "success": info.state == "success", "state": info.state, "duration": info.time}
        self.results.append(result)
        print(f"episode {info.episode:3d} seed {info.seed:5d}  {info.instruction:34s} "
              f"{'success' if result['success'] else info.state:8s} {info.time:6.2f} s", flush=True)
        if self.episodes and len(self.results) >= self.episodes:
            self.done.set()

    def take_frame(self, timeout: float) -> np.ndarray | None:
        if not self._frame_ready.wait(timeout):
            return None
        with self._lock:
            self._frame_ready.clear()
            return self._frame


class WindowView:
    """A matplotlib window (TkAgg), updated in the main thread."""

    path = None

    def __init__(self):
        import matplotlib

        matplotlib.use("TkAgg")
        import matplotlib.pyplot as plt

        self.plt = plt
        plt.ion()
        self.figure, self.axes = plt.subplots(figsize=(8, 3.5))
        self.figure.canvas.manager.set_window_title("arm_act demo")
        self.axes.axis("off")
        self.image = None
        self.frames = 0

    def show(self, frame: np.ndarray) -> None:
        if self.image is None:
            self.image = self.axes.imshow(frame)
        else:
            self.image.set_data(frame)
        self.plt.pause(0.001)
        self.frames += 1

    def close(self) -> None:
        self.plt.close(self.figure)


class VideoView:
    def __init__(self, path: Path, fps: float = 10.0):
        self.path = path
        self.writer = VideoWriter(path, fps)

    @property
    def frames(self) -> int:
        return self.writer.frames

    def show(self, frame: np.ndarray) -> None:
        self.writer.write(frame)

    def close(self) -> None:
        self.writer.close()


def open_view(video: Path | None):
    """A video when asked for or when there is no display; else a window (falling back to a
    video if no window can be opened)."""
    if video is None and os.environ.get("DISPLAY"):
        try:
            return WindowView()
        except Exception as exc:  # noqa: BLE001 - no Tk, or the display refuses: the video still works
            print(f"no window ({exc}); writing {DEFAULT_VIDEO} instead")
    return VideoView(video or DEFAULT_VIDEO)
