"""Conversions between the sim's arrays and ROS 2 messages, in both directions.

One implementation shared by everything that publishes or records the live topics
(sim_node, expert_node, policy_node, `arm-act collect`, evaluation bags), so a dataset
recorded in process carries exactly the messages the live system publishes.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from builtin_interfaces.msg import Duration, Time
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float32MultiArray, Float64MultiArray, Header, MultiArrayDimension, String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
from visualization_msgs.msg import Marker, MarkerArray

from arm_act.sim.env import STATUSES as EPISODE_STATES  # re-exported: the states an episode message may carry
from arm_act.sim.robot import ARM_JOINTS as _ARM_JOINT_NAMES
from arm_act.sim.robot import JOINT_NAMES  # re-exported: the joint order of every message

ARM_JOINTS = len(_ARM_JOINT_NAMES)  # arm joints in a command; the gripper is a separate topic
WORLD_FRAME = "world"
MAX_STAMP_S = 2.0**31  # builtin_interfaces/Time holds int32 seconds
MAX_EPISODE_COLOURS = 16  # EpisodeInfo.colours: more than any table holds
ARM_COMMAND_TOPIC = "arm_controller/commands"
GRIPPER_COMMAND_TOPIC = "gripper_controller/commands"
# bag_recorder's report (std_msgs/String JSON, {topic: publishers its reader has matched}),
# under the recorder's node name: "<recorder>/" + this (sim_node's wait_for_recorder reads it).
RECORDER_MATCHES_TOPIC = "publishers_matched"


class ConversionError(ValueError):
    """A message that cannot be turned into the arrays the core expects."""


# ---------------------------------------------------------------- time stamps
# The first published sim time (s): ROS treats time 0 as "not set", and timers on sim time do
# not start until the clock is non-zero. sim_node starts its clock here; a bag of an
# in-process episode (bags/episode.py) is stamped from here, as sim_node would stamp it.
CLOCK_START = 1.0


def to_stamp(seconds: float) -> Time:
    """Sim seconds -> builtin_interfaces/Time, rounded to the nanosecond."""
    nanos = int(round(seconds * 1e9))
    return Time(sec=nanos // 1_000_000_000, nanosec=nanos % 1_000_000_000)


def stamp_to_ns(stamp: Time) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


_CDR_BYTE_ORDER = {b"\x00\x00": ">", b"\x00\x01": "<"}  # the encapsulation header's first two bytes


def header_stamp_ns(raw: bytes) -> int:
    """The header stamp (ns) of a serialized message whose first field is a std_msgs/Header
    (Image, JointTrajectory, ...), read from the CDR bytes without deserializing the rest:
    what a subscription with raw=True receives. A 50-point JointTrajectory takes ~0.7 ms to
    deserialize in rclpy; this reads 12 bytes."""
    import struct

    order = _CDR_BYTE_ORDER.get(bytes(raw[:2]))
    if order is None or len(raw) < 12:
        raise ConversionError(f"not a CDR message with a header: {len(raw)} bytes starting {bytes(raw[:4])!r}")
    sec, nanosec = struct.unpack_from(order + "iI", raw, 4)
    if nanosec >= 1_000_000_000:
        raise ConversionError(f"header stamp nanosec={nanosec} is out of range")
    return sec * 1_000_000_000 + nanosec


def stamp_to_sec(stamp: Time) -> float:
    return stamp_to_ns(stamp) * 1e-9


def header(seconds: float, frame_id: str = WORLD_FRAME) -> Header:
    return Header(stamp=to_stamp(seconds), frame_id=frame_id)


def clock_msg(seconds: float) -> Clock:
    return Clock(clock=to_stamp(seconds))


# ---------------------------------------------------------------- joint states
def joint_state_msg(seconds: float, position, velocity, effort, names=JOINT_NAMES) -> JointState:
    return JointState(
        header=header(seconds, ""),
        name=list(names),
        position=[float(v) for v in position],
        velocity=[float(v) for v in velocity],
        effort=[float(v) for v in effort],
    )


def joint_positions_from_msg(msg: JointState, names: Sequence[str] = JOINT_NAMES) -> np.ndarray:
    """Positions in `names` order, (len(names),) float64; raises ConversionError when a joint
    is missing or a value is not finite (a NaN joint state must never reach the policy)."""
    if len(msg.position) != len(msg.name):
        raise ConversionError(
            f"joint_states has {len(msg.name)} names but {len(msg.position)} positions"
        )
    index = {name: i for i, name in enumerate(msg.name)}
    missing = [name for name in names if name not in index]
    if missing:
        raise ConversionError(f"joint_states lacks joints {missing}")
    positions = np.array([msg.position[index[name]] for name in names], dtype=np.float64)
    if not np.all(np.isfinite(positions)):
        raise ConversionError(f"joint_states holds non-finite positions {positions.tolist()}")
    return positions


# ---------------------------------------------------------------- images
def optical_frame(camera: str) -> str:
    return f"{camera}_camera_optical_frame"


def image_msg(seconds: float, rgb: np.ndarray, camera: str) -> Image:
    """(H, W, 3) uint8 RGB -> sensor_msgs/Image rgb8."""
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ConversionError(f"expected (H, W, 3) uint8, got {rgb.shape} {rgb.dtype}")
    height, width, _ = rgb.shape
    msg = Image(
        header=header(seconds, optical_frame(camera)),
        height=height,
        width=width,
        encoding="rgb8",
        is_bigendian=0,
        step=width * 3,
    )
    msg.data = np.ascontiguousarray(rgb).tobytes()
    return msg


_CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}


def image_from_msg(msg: Image) -> np.ndarray:
    """sensor_msgs/Image -> (H, W, 3) uint8 RGB.

    rgb8 is a zero-copy view of msg.data (read-only); bgr8, rgba8, bgra8 and mono8 are
    converted. Other encodings, or data whose length disagrees with height/step, raise
    ConversionError with the reason.
    """
    channels = _CHANNELS.get(msg.encoding)
    if channels is None:
        raise ConversionError(
            f"unsupported image encoding {msg.encoding!r} (supported: {sorted(_CHANNELS)})"
        )
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height == 0 or width == 0:
        raise ConversionError(f"empty image {width}x{height}")
    if step < width * channels:
        raise ConversionError(f"step {step} < width {width} x {channels} channels")
    buffer = np.frombuffer(msg.data, dtype=np.uint8)
    if buffer.size != height * step:
        raise ConversionError(
            f"image data has {buffer.size} bytes, expected height {height} x step {step}"
        )
    rows = buffer.reshape(height, step)[:, : width * channels]  # drop row padding
    pixels = rows.reshape(height, width, channels)  # (H, W, C)
    if msg.encoding == "rgb8":
        pixels.flags.writeable = False  # a view of the message buffer: never mutate it
        return pixels
    if msg.encoding == "bgr8":
        return pixels[:, :, ::-1].copy()
    if msg.encoding == "rgba8":
        return pixels[:, :, :3].copy()
    if msg.encoding == "bgra8":
        return pixels[:, :, 2::-1].copy()
    return np.repeat(pixels, 3, axis=2)  # mono8


def camera_info_msg(seconds: float, camera: str, width: int, height: int, k: np.ndarray) -> CameraInfo:
    """Pinhole intrinsics (no distortion) in the frame of the matching image."""
    k = np.asarray(k, dtype=np.float64).reshape(3, 3)
    projection = np.zeros((3, 4))
    projection[:, :3] = k
    return CameraInfo(
        header=header(seconds, optical_frame(camera)),
        height=int(height),
        width=int(width),
        distortion_model="plumb_bob",
        d=[0.0] * 5,
        k=k.flatten().tolist(),
        r=np.eye(3).flatten().tolist(),
        p=projection.flatten().tolist(),
    )


# ---------------------------------------------------------------- commands
def float_array_msg(values: Iterable[float]) -> Float64MultiArray:
    return Float64MultiArray(data=[float(v) for v in values])


def command_from_msg(msg: Float64MultiArray, expected: int, what: str) -> np.ndarray:
    """Validate a forward_command_controller style command: length and finiteness.

    Raises ConversionError naming the reason; the caller logs it and keeps the last valid
    target, as forward_command_controller does.
    """
    values = np.asarray(msg.data, dtype=np.float64)
    if values.shape != (expected,):
        raise ConversionError(f"{what} command has {values.size} values, expected {expected}")
    if not np.all(np.isfinite(values)):
        raise ConversionError(f"{what} command holds non-finite values {values.tolist()}")
    return values


def action_chunk_msg(seconds: float, chunk: np.ndarray, control_period: float) -> JointTrajectory:
    """(K, 8) chunk of [7 joint targets, gripper opening] -> JointTrajectory; the gripper
    opening is given for both finger joints so the message names all nine joints."""
    chunk = np.asarray(chunk, dtype=np.float64)
    msg = JointTrajectory(header=header(seconds, ""), joint_names=list(JOINT_NAMES))
    for i, row in enumerate(chunk):
        t = (i + 1) * control_period
        nanos = int(round(t * 1e9))
        msg.points.append(
            JointTrajectoryPoint(
                positions=[float(v) for v in row[:ARM_JOINTS]] + [float(row[ARM_JOINTS])] * 2,
                time_from_start=Duration(sec=nanos // 1_000_000_000, nanosec=nanos % 1_000_000_000),
            )
        )
    return msg


def action_chunk_from_msg(msg: JointTrajectory) -> np.ndarray:
    """JointTrajectory written by action_chunk_msg -> (K, 8)."""
    rows = [list(p.positions[:ARM_JOINTS]) + [p.positions[ARM_JOINTS]] for p in msg.points]
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), ARM_JOINTS + 1)


# ---------------------------------------------------------------- task and episode
def task_msg(instruction: str) -> String:
    return String(data=instruction)


@dataclass(frozen=True)
class EpisodeInfo:
    """The `episode` topic: std_msgs/String carrying one JSON object."""

    episode: int
    seed: int
    n_blocks: int
    state: str
    instruction: str
    time: float  # sim seconds since the episode started
    start: float = 0.0  # sim time (/clock) of the episode's first tick
    control_rate: int = 50
    camera_rate: int = 10
    # The colours of the blocks on the table, as the episode's setup states them (sorted);
    # None where the publisher does not say. policy_node refuses an instruction naming another.
    colours: tuple[str, ...] | None = None
    # The goal changes of the episode so far, in order: ({"time": sim s since the episode
    # started, "instruction": the new words}, ...); None (and absent from the JSON) when there
    # was none, so the message of an episode without one is as before the field existed.
    goal_changes: tuple[dict, ...] | None = None

    @property
    def start_ns(self) -> int:
        return int(round(self.start * 1e9))

    def tick_of(self, stamp_ns: int) -> int:
        """The control tick index of a stamp within this episode."""
        return int(round((stamp_ns - self.start_ns) * self.control_rate / 1e9))

    def is_camera_tick(self, tick: int) -> bool:
        return tick % max(1, self.control_rate // self.camera_rate) == 0

    def __post_init__(self):
        if self.state not in EPISODE_STATES:
            raise ConversionError(f"episode state {self.state!r} not one of {EPISODE_STATES}")
        # A peer can send any JSON: a start of NaN or 1e300 s used to kill every controller
        # at its next tick (int(round(start * 1e9)) raises), a camera_rate of 0 in lockstep.
        if not (math.isfinite(self.start) and 0.0 <= self.start <= MAX_STAMP_S):
            raise ConversionError(f"episode start {self.start!r} is not a sim time in 0 .. {MAX_STAMP_S:.0f} s")
        if not math.isfinite(self.time):
            raise ConversionError(f"episode time {self.time!r} is not finite")
        if not (1 <= self.control_rate <= 10_000 and 1 <= self.camera_rate <= self.control_rate):
            raise ConversionError(f"episode rates control_rate={self.control_rate}, camera_rate={self.camera_rate} "
                                  "must satisfy 1 <= camera_rate <= control_rate <= 10000")
        if self.colours is not None:
            if (not isinstance(self.colours, (list, tuple)) or len(self.colours) > MAX_EPISODE_COLOURS
                    or not all(isinstance(c, str) and 0 < len(c) <= 32 for c in self.colours)):
                raise ConversionError(f"episode colours {self.colours!r:.80} must be a list of at most "
                                      f"{MAX_EPISODE_COLOURS} colour names")
            object.__setattr__(self, "colours", tuple(self.colours))
        if self.goal_changes is not None:
            object.__setattr__(self, "goal_changes", _goal_changes(self.goal_changes))


MAX_GOAL_CHANGES = 1000  # EpisodeInfo.goal_changes: more than any episode sees
MAX_GOAL_CHANGE_CHARS = 500  # ... and the longest instruction one may carry


def _goal_changes(changes) -> tuple[dict, ...]:
    """EpisodeInfo.goal_changes checked: a list of {"time": finite s >= 0, "instruction": text}."""
    if not isinstance(changes, (list, tuple)) or len(changes) > MAX_GOAL_CHANGES:
        raise ConversionError(f"episode goal_changes {changes!r:.80} must be a list of at most "
                              f"{MAX_GOAL_CHANGES} changes")
    out = []
    for change in changes:
        if not isinstance(change, dict):
            raise ConversionError(f"episode goal change {change!r:.80} is not an object")
        at, text = change.get("time"), change.get("instruction")
        if (isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or at < 0
                or not isinstance(text, str) or len(text) > MAX_GOAL_CHANGE_CHARS):
            raise ConversionError(f"episode goal change {change!r:.80} needs a time (s >= 0) and an "
                                  f"instruction (at most {MAX_GOAL_CHANGE_CHARS} characters)")
        out.append({"time": float(at), "instruction": text})
    return tuple(out)


def episode_msg(info: EpisodeInfo) -> String:
    fields = dict(info.__dict__)
    if info.colours is None:
        del fields["colours"]  # not stated: the message is as before the field existed
    else:
        fields["colours"] = list(info.colours)
    if not info.goal_changes:
        del fields["goal_changes"]  # none: as before the field existed
    else:
        fields["goal_changes"] = list(info.goal_changes)
    return String(data=json.dumps(fields, sort_keys=True))


def episode_from_msg(msg: String) -> EpisodeInfo:
    try:
        fields = json.loads(msg.data)
        if not isinstance(fields, dict):
            raise TypeError(f"a JSON {type(fields).__name__}, not an object")
        return EpisodeInfo(
            episode=int(fields["episode"]),
            seed=int(fields["seed"]),
            n_blocks=int(fields["n_blocks"]),
            state=str(fields["state"]),
            instruction=str(fields["instruction"]),
            time=float(fields["time"]),
            start=float(fields.get("start", 0.0)),
            control_rate=int(fields.get("control_rate", 50)),
            camera_rate=int(fields.get("camera_rate", 10)),
            colours=fields.get("colours"),
            goal_changes=fields.get("goal_changes"),
        )
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
        raise ConversionError(f"episode message is not the documented JSON: {exc}") from exc


# ---------------------------------------------------------------- objects
@dataclass(frozen=True)
class ObjectMarker:
    """What the objects topic carries per object; mirrors sim.ObjectState's fields."""

    name: str
    kind: str
    colour: str
    rgba: tuple
    position: tuple
    orientation: tuple
    size: tuple


def objects_msg(seconds: float, objects) -> MarkerArray:
    """sim ObjectStates -> MarkerArray of CUBE markers: ns is the kind, text the colour."""
    array = MarkerArray()
    for index, obj in enumerate(objects):
        marker = Marker(header=header(seconds), ns=obj.kind, id=index, type=Marker.CUBE)
        marker.action = Marker.ADD
        marker.text = f"{obj.name}|{obj.colour}"
        p, q, s, c = obj.position, obj.orientation, obj.size, obj.rgba
        marker.pose.position.x, marker.pose.position.y, marker.pose.position.z = map(float, p)
        (
            marker.pose.orientation.x,
            marker.pose.orientation.y,
            marker.pose.orientation.z,
            marker.pose.orientation.w,
        ) = map(float, q)
        marker.scale.x, marker.scale.y, marker.scale.z = map(float, s)
        marker.color.r, marker.color.g, marker.color.b, marker.color.a = map(float, c)
        array.markers.append(marker)
    return array


def objects_from_msg(msg: MarkerArray) -> list[ObjectMarker]:
    objects = []
    for marker in msg.markers:
        name, _, colour = marker.text.partition("|")
        pose = marker.pose
        values = (
            pose.position.x, pose.position.y, pose.position.z,
            pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w,
        )
        if not all(math.isfinite(v) for v in values):
            raise ConversionError(f"object {name!r} has a non-finite pose")
        objects.append(
            ObjectMarker(
                name=name,
                kind=marker.ns,
                colour=colour,
                rgba=(marker.color.r, marker.color.g, marker.color.b, marker.color.a),
                position=np.array(values[:3]),
                orientation=np.array(values[3:]),
                size=np.array((marker.scale.x, marker.scale.y, marker.scale.z)),
            )
        )
    return objects


# ---------------------------------------------------------------- attention (for viewers)
def attention_msg(grids: dict, cameras: Sequence[str]) -> Float32MultiArray:
    """{camera: (g, g)} -> Float32MultiArray with dims camera x row x col; the camera
    dimension's label lists the camera names ("front,wrist")."""
    stack = np.stack([np.asarray(grids[c], dtype=np.float32) for c in cameras])  # (C, g, g)
    c, rows, cols = stack.shape
    msg = Float32MultiArray(data=stack.ravel().tolist())
    msg.layout.dim = [
        MultiArrayDimension(label=",".join(cameras), size=c, stride=c * rows * cols),
        MultiArrayDimension(label="row", size=rows, stride=rows * cols),
        MultiArrayDimension(label="col", size=cols, stride=cols),
    ]
    return msg


def attention_from_msg(msg: Float32MultiArray) -> dict[str, np.ndarray]:
    if len(msg.layout.dim) != 3:
        raise ConversionError("attention message needs camera x row x col dims")
    cameras = msg.layout.dim[0].label.split(",")
    shape = tuple(int(d.size) for d in msg.layout.dim)
    values = np.asarray(msg.data, dtype=np.float32)
    if values.size != int(np.prod(shape)) or len(cameras) != shape[0]:
        raise ConversionError(f"attention message has {values.size} values for dims {shape}")
    grids = values.reshape(shape)
    return {name: grids[i] for i, name in enumerate(cameras)}
