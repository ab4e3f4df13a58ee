"""Synthetic demonstration bags in the layout `arm-act collect` writes (docs/architecture.md,
"Bags"), built from rosbags message classes so writing needs no rclpy.

Values encode where they come from, so alignment is checkable by eye:
  joint state of tick k: position[j] = k + j / 100
  arm command of tick k: data[j] = 1000 + k + j / 100;  gripper command: 0.001 * (k % 40)
  camera image of tick k: every pixel of camera c equals (k + 50 * c) % 256
  objects of tick k: the red block (the instruction's) at target_position(k), a green one
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from arm_act.bags import BagWriter, live_topic_specs, typestore

JOINTS = tuple(f"panda_joint{i}" for i in range(1, 8)) + ("panda_finger_joint1",
                                                         "panda_finger_joint2")
INSTRUCTION = "put the red block in the box"


def _types():
    return typestore().types


def _header(ns: int, frame: str = ""):
    t = _types()
    return t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](
        sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000), frame_id=frame)


def _floats(values):
    t = _types()
    return t["std_msgs/msg/Float64MultiArray"](
        layout=t["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0),
        data=np.asarray(values, dtype=np.float64))


def _string(text: str):
    return _types()["std_msgs/msg/String"](data=text)


def arm_command(k: int) -> np.ndarray:
    return 1000.0 + k + np.arange(7) / 100.0


def gripper_command(k: int) -> float:
    return 0.001 * (k % 40)


def joint_position(k: int) -> np.ndarray:
    return k + np.arange(9) / 100.0


def pixel(k: int, camera_index: int) -> int:
    return (k + 50 * camera_index) % 256


def target_position(k: int) -> np.ndarray:
    return np.array([0.4 + k / 1000.0, 0.1, 0.02])


def objects_msg(k: int):
    t = _types()

    def marker(index: int, colour: str, position) -> object:
        pose = t["geometry_msgs/msg/Pose"](
            position=t["geometry_msgs/msg/Point"](x=position[0], y=position[1], z=position[2]),
            orientation=t["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0))
        return t["visualization_msgs/msg/Marker"](
            header=_header(0), ns="block", id=index, type=1, action=0, pose=pose,
            scale=t["geometry_msgs/msg/Vector3"](x=0.04, y=0.04, z=0.04),
            color=t["std_msgs/msg/ColorRGBA"](r=1.0, g=0.0, b=0.0, a=1.0),
            lifetime=t["builtin_interfaces/msg/Duration"](sec=0, nanosec=0), frame_locked=False,
            points=[], colors=[], texture_resource="",
            texture=t["sensor_msgs/msg/CompressedImage"](
                header=_header(0), format="", data=np.zeros(0, np.uint8)),
            uv_coordinates=[], text=f"block_{index}|{colour}", mesh_resource="",
            mesh_file=t["visualization_msgs/msg/MeshFile"](filename="", data=np.zeros(0, np.uint8)),
            mesh_use_embedded_materials=False)

    return t["visualization_msgs/msg/MarkerArray"](markers=[
        marker(0, "green", (0.5, -0.1, 0.02)), marker(1, "red", target_position(k))])


def image_msg(ns: int, value: int, size: int, encoding: str = "rgb8"):
    channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "mono8": 1}[encoding]
    data = np.full(size * size * channels, value, dtype=np.uint8)
    return _types()["sensor_msgs/msg/Image"](
        header=_header(ns, "cam"), height=size, width=size, encoding=encoding, is_bigendian=0,
        step=size * channels, data=data)


def write_demo_bag(path: Path, ticks: int = 30, *, control_rate: int = 50, camera_rate: int = 10,
                   start: float = 2.0, image_size: int = 32, cameras=("front", "wrist"),
                   success: bool | None = True, final_state: str = "success",
                   instruction: str = INSTRUCTION, commands: bool = True,
                   command_delay_ns: int = 0, encoding: str = "rgb8", seed: int = 7,
                   skip_topics: tuple[str, ...] = (), metadata: dict | None = None) -> Path:
    """One episode of `ticks` control ticks; success=None leaves custom_data without
    "success" (the final /episode state decides); metadata: more custom_data entries."""
    specs = [s for s in live_topic_specs(cameras) if s.name not in skip_topics]
    extra, metadata = metadata, {"seed": seed, "n_blocks": 3, "instruction": instruction,
                                 "expert": "scripted", "status": final_state}
    metadata.update(extra or {})
    if success is not None:
        metadata["success"] = "true" if success else "false"
    start_ns = int(round(start * 1e9))
    period = 1e9 / control_rate
    every = control_rate // camera_rate
    topics = {s.name for s in specs}

    def write(writer, topic, ns, msg):
        if topic in topics:
            writer.write(topic, ns, msg)

    def episode(state: str, t: float):
        return _string(json.dumps({"episode": 0, "seed": seed, "n_blocks": 3, "state": state,
                                   "instruction": instruction, "time": t, "start": start,
                                   "control_rate": control_rate, "camera_rate": camera_rate}))

    with BagWriter(path, specs, metadata=metadata) as writer:
        write(writer, "/task", start_ns, _string(instruction))
        write(writer, "/episode", start_ns, episode("running", 0.0))
        for k in range(ticks):
            ns = start_ns + int(round(k * period))
            pos = joint_position(k)
            js = _types()["sensor_msgs/msg/JointState"](
                header=_header(ns), name=list(JOINTS), position=pos,
                velocity=np.zeros(9), effort=np.zeros(9))
            write(writer, "/joint_states", ns, js)
            write(writer, "/objects", ns, objects_msg(k))
            if k % every == 0:
                for c, cam in enumerate(cameras):
                    write(writer, f"/camera/{cam}/image_raw", ns,
                          image_msg(ns, pixel(k, c), image_size, encoding))
            if commands:
                write(writer, "/arm_controller/commands", ns + command_delay_ns,
                      _floats(arm_command(k)))
                write(writer, "/gripper_controller/commands", ns + command_delay_ns,
                      _floats([gripper_command(k)]))
        end_ns = start_ns + int(round(ticks * period))
        write(writer, "/episode", end_ns, episode(final_state, ticks / control_rate))
    return path
