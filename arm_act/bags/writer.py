"""BagWriter: rosbag2 MCAP bags written so that nothing is lost (arm_act.bags re-exports it).

Shared by the bag_recorder node, `arm-act collect` and evaluation. Bags are the standard
rosbag2 layout written by the `rosbags` library: a directory holding metadata.yaml (rosbag2
metadata version 9, custom_data, offered QoS per topic) and one .mcap file (ros2 profile,
ros2msg schemas, optional zstd chunk compression), which `ros2 bag info/play`, Foxglove,
the `mcap` library and rosbags' AnyReader read. Messages are stored as canonical CDR
(arm_act.bags.codec explains why rclpy's own serialization cannot be stored as is).

Never losing data: rosbags' MCAP writer keeps the current chunk in memory and writes the
summary and metadata.yaml only at close. BagWriter ends the chunk and flushes the file every
flush_interval_s and on flush(), so a writer killed with SIGKILL leaves a valid MCAP prefix
(complete chunks, no summary, no footer). While a bag is open it holds a marker file
(MARKER_NAME) describing it; the marker goes only after metadata.yaml is written, so a bag
whose writer died is always recognisable as incomplete, and repair() rebuilds it.
"""
from __future__ import annotations

import errno
import json
import logging
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from rosbags.interfaces import Qos
from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer, WriterError
from rosbags.rosbag2.metadata import dump_qos_v9
from rosbags.rosbag2.storage_mcap import McapWriter

from arm_act.bags.codec import (
    DEFAULT_QOS,
    LATCHED_QOS,
    MARKER_NAME,
    ROSBAG2_VERSION,
    VERSION_KEY,
    BagError,
    encode_cdr,
    software_version,
    to_rosbags_qos,
    typestore,
)

logger = logging.getLogger(__name__)

COMPRESSIONS = (None, "zstd")  # zstd: MCAP chunk compression, decoded by every MCAP reader


@dataclass(frozen=True)
class TopicSpec:
    """A topic of a bag: fully qualified name, ROS 2 type ('sensor_msgs/msg/Image') and the
    QoS profiles its publishers offered (rclpy QoSProfile or rosbags Qos; one or several)."""

    name: str
    msgtype: str
    qos: object = DEFAULT_QOS

    def __post_init__(self):
        if not self.name or not self.name.replace("/", "").replace("_", "").isalnum():
            raise BagError(f"topic name {self.name!r} is not a valid ROS topic name")
        if not self.name.startswith("/"):
            object.__setattr__(self, "name", "/" + self.name)  # rosbag2 stores absolute names
        if self.msgtype not in typestore().fielddefs:
            raise BagError(
                f"unknown message type {self.msgtype!r} for topic {self.name} "
                "(not in the ROS 2 Kilted type store; expected e.g. 'sensor_msgs/msg/Image')"
            )
        single = isinstance(self.qos, Qos) or not isinstance(self.qos, (list, tuple))  # Qos is a tuple
        profiles = (self.qos,) if single else self.qos
        object.__setattr__(self, "qos", tuple(to_rosbags_qos(p) for p in profiles if p is not None))


# The topics the live system publishes (docs/architecture.md), relative names, with the QoS their
# publishers offer (sim_node: depth 10; task and episode transient-local, depth 1).
LATCHED_TOPICS = ("task", "episode")
SENSOR_TOPIC_TYPES = ("rosgraph_msgs/msg/Clock", "sensor_msgs/msg/JointState", "sensor_msgs/msg/Image",
                      "sensor_msgs/msg/CameraInfo")


def live_topic_types(cameras: Sequence[str] = ("front", "wrist")) -> dict[str, str]:
    """{relative topic name: type} of everything sim, controllers and policy publish."""
    types = {"/clock": "rosgraph_msgs/msg/Clock", "joint_states": "sensor_msgs/msg/JointState"}
    for camera in cameras:
        types[f"camera/{camera}/image_raw"] = "sensor_msgs/msg/Image"
        types[f"camera/{camera}/camera_info"] = "sensor_msgs/msg/CameraInfo"
    types.update({
        "task": "std_msgs/msg/String",
        "episode": "std_msgs/msg/String",
        "objects": "visualization_msgs/msg/MarkerArray",
        "arm_controller/commands": "std_msgs/msg/Float64MultiArray",
        "gripper_controller/commands": "std_msgs/msg/Float64MultiArray",
        "policy/action_chunk": "trajectory_msgs/msg/JointTrajectory",
        "policy/diagnostics": "diagnostic_msgs/msg/DiagnosticArray",
        "policy/attention": "std_msgs/msg/Float32MultiArray",  # recorded so replays show it (arm_act.view)
        "policy/instruction_attention": "std_msgs/msg/Float32MultiArray",
    })
    return types


def live_topic_specs(cameras: Sequence[str] = ("front", "wrist"), namespace: str = "/",
                     exclude: Iterable[str] = ()) -> list[TopicSpec]:
    """TopicSpecs of the live topics under `namespace`, with the QoS sim_node offers."""
    skip = set(exclude)
    specs = []
    for name, msgtype in live_topic_types(cameras).items():
        if name in skip:
            continue
        full = name if name.startswith("/") else f"{namespace.rstrip('/')}/{name}"
        specs.append(TopicSpec(full, msgtype, LATCHED_QOS if name in LATCHED_TOPICS else DEFAULT_QOS))
    return specs


# ---------------------------------------------------------------- writing
class _FlushableMcapWriter(McapWriter):
    """rosbags' MCAP storage plus flush(): end the pending chunk and hand it to the OS."""

    def flush(self, fsync: bool) -> None:
        if self.chunk.msgs:
            self.close_chunk()
        self.bio.flush()
        if fsync:
            os.fsync(self.bio.fileno())


class _Rosbag2Writer(Writer):
    STORAGE_PLUGINS = {**Writer.STORAGE_PLUGINS, StoragePlugin.MCAP: _FlushableMcapWriter}


def _write_json_atomic(path: Path, content: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(content, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _custom_value(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


class BagWriter:
    """Writes one rosbag2 MCAP bag. Not thread-safe: call it from one thread.

    metadata: custom_data for metadata.yaml (values that are not str are JSON-encoded);
    arm_act_version is added. compression: None or "zstd" (MCAP chunk compression).
    Chunks are flushed to the OS every flush_interval_s (checked on write) and on flush();
    flush_interval_s=None flushes only on flush() and when a chunk reaches 1 MiB, so the
    file's bytes depend on its content alone (reproducible datasets), not on the wall clock;
    fsync=True also forces them to the disk. Use as a context manager: a clean exit closes
    the bag, an exception leaves it marked incomplete (readable after repair()).
    """

    def __init__(self, path: str | os.PathLike, topics: Sequence[TopicSpec] = (),
                 metadata: Mapping[str, object] | None = None, compression: str | None = None,
                 *, flush_interval_s: float | None = 1.0, fsync: bool = False):
        self.path = Path(path)
        if compression not in COMPRESSIONS:
            raise BagError(f"compression={compression!r} must be one of {COMPRESSIONS}")
        if flush_interval_s is not None and not flush_interval_s > 0:
            raise BagError(f"flush_interval_s={flush_interval_s} must be > 0 or None")
        names = [spec.name for spec in topics]
        if len(set(names)) != len(names):
            raise BagError(f"duplicate topics in {names}")
        self.compression = compression
        self.flush_interval_s = None if flush_interval_s is None else float(flush_interval_s)
        self.fsync = fsync
        self.message_count = 0
        self._specs: dict[str, TopicSpec] = {}
        self._connections = {}
        self._custom: dict[str, str] = {VERSION_KEY: software_version()}
        self._custom.update({str(k): _custom_value(v) for k, v in (metadata or {}).items()})
        self._state = "open"
        self._marker_dirty = False
        self._started = time.time()
        if self.path.exists():
            raise BagError(f"{self.path} exists already; bags are never overwritten")
        self._writer = _Rosbag2Writer(self.path, version=ROSBAG2_VERSION, storage_plugin=StoragePlugin.MCAP)
        if compression == "zstd":
            self._writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        try:
            self._writer.open()
        except WriterError as exc:
            raise BagError(f"{self.path}: {exc}") from None
        except OSError as exc:
            raise BagError(f"cannot create bag directory {self.path}: {exc.strerror or exc}") from None
        try:
            self._write_marker()
            for spec in topics:
                self.add_topic(spec)
        except OSError as exc:
            self._fail(exc)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        self._next_flush = math.inf if self.flush_interval_s is None else time.monotonic() + self.flush_interval_s

    @property
    def marker_path(self) -> Path:
        return self.path / MARKER_NAME

    @property
    def closed(self) -> bool:
        return self._state != "open"

    @property
    def topics(self) -> dict[str, TopicSpec]:
        return dict(self._specs)

    def _write_marker(self, error: str | None = None) -> None:
        _write_json_atomic(self.marker_path, {
            "what": "this bag's writer has not closed it (still recording, killed or crashed); "
                    "repair with arm_act.bags.repair(path)",
            "error": error,
            "pid": os.getpid(),
            "started_unix": self._started,
            "compression": self.compression,
            "custom_data": self._custom,
            "topics": [{"name": s.name, "type": s.msgtype, "offered_qos_profiles": dump_qos_v9(list(s.qos))}
                       for s in self._specs.values()],
        })
        self._marker_dirty = False

    def _require_open(self) -> None:
        if self._state != "open":
            raise BagError(f"{self.path}: the bag is not open for writing (writer {self._state})")

    def _fail(self, exc: OSError):
        reason = "disk full (ENOSPC)" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        self._state = "failed"
        with suppress(Exception):
            self._writer.abort()
        with suppress(OSError):
            self._write_marker(error=reason)
        raise BagError(f"{self.path}: {reason} while writing; the partial bag is marked incomplete "
                       "(arm_act.bags.repair recovers what was flushed)") from exc

    def add_topic(self, spec: TopicSpec) -> None:
        self._require_open()
        if spec.name in self._specs:
            raise BagError(f"{self.path}: topic {spec.name} added twice")
        try:
            self._connections[spec.name] = self._writer.add_connection(
                spec.name, spec.msgtype, typestore=typestore(), offered_qos_profiles=list(spec.qos))
        except WriterError as exc:
            raise BagError(f"{self.path}: {exc}") from None
        self._specs[spec.name] = spec
        self._marker_dirty = True

    def set_metadata(self, key: str, value) -> None:
        """Set one custom_data entry (written to the marker at the next flush, to
        metadata.yaml at close)."""
        self._custom[str(key)] = _custom_value(value)
        self._marker_dirty = True

    def write(self, topic: str, timestamp_ns: int, message) -> None:
        """Write an rclpy message, a rosbags message or CDR bytes received on `topic` at
        `timestamp_ns` (bag receive time; sim time in this project)."""
        self._require_open()
        name = topic if topic.startswith("/") else "/" + topic
        connection = self._connections.get(name)
        if connection is None:
            raise BagError(f"{self.path}: topic {name} is not in the bag (topics: {sorted(self._specs)})")
        stamp = int(timestamp_ns)
        if stamp < 0 or stamp != timestamp_ns:
            raise BagError(f"{self.path}: timestamp_ns={timestamp_ns!r} must be a non-negative integer")
        data = encode_cdr(message, connection.msgtype)
        try:
            self._writer.write(connection, stamp, data)
        except OSError as exc:
            self._fail(exc)
        self.message_count += 1
        if time.monotonic() >= self._next_flush:
            self.flush()

    def flush(self) -> None:
        """Write the pending chunk so that a killed process loses nothing before this call."""
        self._require_open()
        try:
            self._writer.storage.flush(self.fsync)
            if self._marker_dirty:
                self._write_marker()
        except OSError as exc:
            self._fail(exc)
        self._schedule_flush()

    def close(self) -> None:
        """Write the MCAP summary and metadata.yaml, then remove the marker. Idempotent."""
        if self._state != "open":
            return
        for key, value in self._custom.items():
            self._writer.set_custom_data(key, value)
        try:
            self._writer.close()
        except OSError as exc:
            self._fail(exc)
        self._state = "closed"
        try:
            self.marker_path.unlink()
        except OSError as exc:  # the bag stays marked incomplete: wrong in the safe direction
            logger.warning("%s: could not remove %s: %s", self.path, MARKER_NAME, exc)

    def abort(self, reason: str) -> None:
        """Stop writing without finishing: flushed data stays, the bag stays marked incomplete."""
        if self._state != "open":
            return
        self._state = "aborted"
        with suppress(OSError):
            self._writer.storage.flush(self.fsync)
        with suppress(Exception):
            self._writer.abort()
        with suppress(OSError):
            self._write_marker(error=reason)

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort(f"writer stopped by {exc_type.__name__}: {exc}")
