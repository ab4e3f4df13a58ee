"""What bag writing and reading share: errors, the type store, QoS profiles and CDR.

Serialization. rclpy's serialize_message (rmw_fastrtps, Kilted wheels) returns a buffer
sized by the type support's *estimated* serialized size, which counts 8-byte alignment in
front of every float64 sequence even when the sequence is empty and the serializer writes
no padding there: a JointState with empty velocity/effort comes out 8 bytes too long, a
JointTrajectory whose points have empty velocities 60 bytes. rosbags (like rosbag2's
readers) accepts at most the 3 bytes of CDR end padding and rejects the rest ("CDR message
size mismatch"). Data received over DDS (raw subscriptions) has the exact length, but its
alignment gaps hold whatever was in memory. So every message is stored in one canonical
form: the CDR stream is decoded by the rosbags type store of our distribution (Kilted),
which reads the fields up to where the message ends and ignores the tail, and encoded
again: exact-length CDR with zeroed padding, bit-identical for equal messages. Tests prove
that rclpy and rosbags both read it back field for field.
"""
from __future__ import annotations

import struct
from functools import lru_cache

from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
from rosbags.typesys import Stores, get_typestore

ROSBAG2_VERSION = 9  # the metadata version of Jazzy/Kilted rosbag2, the newest rosbags writes
MARKER_NAME = "recording_incomplete.json"  # present while a bag is open or after its writer died
INCOMPLETE_KEY = "arm_act_incomplete"  # custom_data of repaired bags: "true"
INCOMPLETE_REASON_KEY = "arm_act_incomplete_reason"
VERSION_KEY = "arm_act_version"


class BagError(Exception):
    """A bag cannot be written or read; the message is one line naming the bag and why."""


def software_version() -> str:
    try:
        from arm_act import __version__

        return str(__version__)
    except ImportError:
        from importlib import metadata

        try:
            return metadata.version("arm_act")
        except metadata.PackageNotFoundError:
            return "0.1.0"


@lru_cache(maxsize=1)
def typestore():
    """The rosbags type store of the ROS 2 distribution of our rclpy wheels (Kilted); its
    type hashes equal those rmw reports for live publishers (tested)."""
    return get_typestore(Stores.ROS2_KILTED)


# ---------------------------------------------------------------- QoS
def _qos_time(nanoseconds: int) -> QosTime:
    sec, nsec = divmod(int(nanoseconds), 1_000_000_000)
    return QosTime(sec, nsec)


def to_rosbags_qos(profile) -> Qos:
    """rclpy QoSProfile (or a rosbags Qos) -> rosbags Qos; both use rmw's enum values."""
    if isinstance(profile, Qos):
        return profile
    try:
        return Qos(
            QosHistory(int(profile.history.value)),
            int(profile.depth),
            QosReliability(int(profile.reliability.value)),
            QosDurability(int(profile.durability.value)),
            _qos_time(profile.deadline.nanoseconds),
            _qos_time(profile.lifespan.nanoseconds),
            QosLiveliness(int(profile.liveliness.value)),
            _qos_time(profile.liveliness_lease_duration.nanoseconds),
            bool(profile.avoid_ros_namespace_conventions),
        )
    except (AttributeError, ValueError, TypeError) as exc:
        raise BagError(f"cannot convert {profile!r} to a QoS profile: {exc}") from None


def make_qos(*, reliable: bool = True, transient_local: bool = False, depth: int = 10) -> Qos:
    """A keep-last profile with rmw's default deadline, lifespan and liveliness."""
    zero = QosTime(0, 0)
    return Qos(
        QosHistory.KEEP_LAST, depth,
        QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
        QosDurability.TRANSIENT_LOCAL if transient_local else QosDurability.VOLATILE,
        zero, zero, QosLiveliness.AUTOMATIC, zero, False,
    )


DEFAULT_QOS = make_qos()  # rclpy's default publisher profile: reliable, volatile, depth 10
LATCHED_QOS = make_qos(transient_local=True, depth=1)


# ---------------------------------------------------------------- CDR
def ros_type_name(message) -> str:
    """'sensor_msgs/msg/JointState' for an rclpy message instance."""
    cls = type(message)
    return f"{cls.__module__.split('.')[0]}/msg/{cls.__name__}"


def decode_cdr(raw: bytes | bytearray | memoryview, msgtype: str):
    """CDR bytes -> rosbags message object, ignoring bytes after the message's end."""
    store = typestore()
    view = memoryview(raw)
    if len(view) < 4 or view[0] != 0 or view[1] not in (0, 1):
        raise BagError(f"{msgtype}: data is not CDR (bad encapsulation header)")
    try:
        msgdef = store.get_msgdef(msgtype)
    except KeyError:
        raise BagError(f"unknown message type {msgtype!r}") from None
    decode = msgdef.deserialize_cdr_le if view[1] else msgdef.deserialize_cdr_be
    try:
        message, _end = decode(view[4:], 0, msgdef.cls, store)
    except (struct.error, UnicodeDecodeError, ValueError, IndexError) as exc:
        raise BagError(f"{msgtype}: cannot decode CDR data ({exc})") from None
    return message


def encode_cdr(message, msgtype: str) -> bytes:
    """rclpy message, rosbags message or CDR bytes of `msgtype` -> canonical CDR bytes."""
    if isinstance(message, (bytes, bytearray, memoryview)):
        message = decode_cdr(message, msgtype)
    elif getattr(message, "__msgtype__", None) is None:  # an rclpy message
        if ros_type_name(message) != msgtype:
            raise BagError(f"got a {ros_type_name(message)} message for a {msgtype} topic")
        from rclpy.serialization import serialize_message  # only rclpy callers pay for rclpy

        message = decode_cdr(serialize_message(message), msgtype)
    elif message.__msgtype__ != msgtype:
        raise BagError(f"got a {message.__msgtype__} message for a {msgtype} topic")
    return bytes(typestore().serialize_cdr(message, msgtype, little_endian=True))
