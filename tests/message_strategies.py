"""Hypothesis strategies for ROS 2 messages: any message a peer can send, of any type.

`messages(cls)` builds every field of a message class from its rosidl type description:
numbers over their whole range with NaN, +-inf and the extremes, strings of any text,
sequences empty or long, nested messages recursively. The `*_like` strategies start from a
message our nodes would accept and break one thing at a time (the cases random bytes rarely
reach: the right joint names with a bad value, a JSON object with a bad field, a frame from
the other camera, a stamp far in the future).
"""
from __future__ import annotations

import importlib
import json

import numpy as np
from hypothesis import strategies as st
from rosidl_parser import definition as rd

from arm_act.ros import conversions as conv

INT_RANGES = {
    "int8": (-2**7, 2**7 - 1), "uint8": (0, 2**8 - 1), "int16": (-2**15, 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1), "uint64": (0, 2**64 - 1),
    "char": (0, 255), "byte": (0, 255), "octet": (0, 255),
}
EXTREME_FLOATS = [0.0, -0.0, 1e-308, -1e308, 1e308, float("inf"), float("-inf"), float("nan"), 1e19, -3.0e38, 3.0e38]
MAX_SEQUENCE = 40  # element count of generated sequences (bytes: up to 64 KiB, below)


def _floats(width: int):
    return st.one_of(st.sampled_from(EXTREME_FLOATS if width == 64 else EXTREME_FLOATS[:4] + EXTREME_FLOATS[5:8]
                                     + [3.0e38, -3.0e38]),
                     st.floats(width=width, allow_nan=True, allow_infinity=True))


def _ints(name: str):
    lo, hi = INT_RANGES[name]
    return st.one_of(st.sampled_from([lo, hi, 0, 1]), st.integers(lo, hi))


def _basic(name: str):
    if name in ("double", "long double"):
        return _floats(64)
    if name == "float":
        return _floats(32)
    if name == "boolean":
        return st.booleans()
    if name in ("octet", "byte"):
        return st.binary(min_size=1, max_size=1)
    if name == "char":
        return st.characters(max_codepoint=127)
    if name in ("wchar",):
        return st.characters()
    return _ints(name)


def _text(max_size: int | None = None):
    size = 200 if max_size is None else max_size
    return st.one_of(st.text(max_size=size), st.sampled_from(["", " ", "\x00", "{", "[" * 200, "null", "NaN"]))


def _class_of(namespaced: rd.NamespacedType):
    module = importlib.import_module(".".join(namespaced.namespaces))
    return getattr(module, namespaced.name)


def _value(slot):
    if isinstance(slot, rd.BasicType):
        return _basic(slot.typename)
    if isinstance(slot, rd.UnboundedString | rd.UnboundedWString):
        return _text()
    if isinstance(slot, rd.BoundedString | rd.BoundedWString):
        return _text(slot.maximum_size)
    if isinstance(slot, rd.NamespacedType):
        return st.deferred(lambda: messages(_class_of(slot)))
    if isinstance(slot, rd.Array):
        return st.lists(_value(slot.value_type), min_size=slot.size, max_size=slot.size)
    if isinstance(slot, rd.AbstractSequence):
        inner = slot.value_type
        limit = slot.maximum_size if isinstance(slot, rd.BoundedSequence) else MAX_SEQUENCE
        if isinstance(inner, rd.BasicType) and inner.typename in ("uint8", "octet", "byte"):
            size = slot.maximum_size if isinstance(slot, rd.BoundedSequence) else 65536
            data = st.binary(max_size=size)
            return data if inner.typename != "uint8" else data.map(list)
        return st.lists(_value(inner), max_size=limit)
    raise TypeError(f"no strategy for {slot!r}")


@st.composite
def _build(draw, cls):
    msg = cls()
    for field, slot in zip(cls.get_fields_and_field_types(), cls.SLOT_TYPES, strict=True):
        value = draw(_value(slot))
        if isinstance(slot, rd.BasicType) and slot.typename in ("octet", "byte"):
            value = bytes(value)
        if isinstance(slot, rd.AbstractSequence | rd.Array) and isinstance(slot.value_type, rd.BasicType) \
                and slot.value_type.typename in ("octet", "byte") and not isinstance(value, bytes):
            value = [bytes([b]) if isinstance(b, int) else b for b in value]
        setattr(msg, field, value)
    return msg


def messages(cls):
    """Any message of type `cls`."""
    return _build(cls)


# ---------------------------------------------------------------- near-valid messages
def stamps():
    """Time stamps: around the usual sim time, in the past, far in the future, the extremes."""
    return st.one_of(st.floats(0.0, 30.0), st.sampled_from([0.0, 1.0, 1e6, 2.0**31 - 1.0]),
                     st.floats(0.0, 2.0**31 - 1.0)).map(conv.to_stamp)


@st.composite
def joint_states_like(draw):
    from sensor_msgs.msg import JointState

    names = list(conv.JOINT_NAMES)
    if draw(st.booleans()):
        names = draw(st.permutations(names))
    if draw(st.integers(0, 4)) == 0:
        names = names[: draw(st.integers(0, len(names)))] + draw(st.lists(st.text(max_size=12), max_size=3))
    n = len(names) + draw(st.sampled_from([0, 0, 0, -1, 1]))
    values = draw(st.lists(_floats(64), min_size=max(n, 0), max_size=max(n, 0)))
    if draw(st.booleans()):  # mostly plausible joints, one odd value
        values = [draw(st.floats(-0.5, 0.04)) for _ in range(max(n, 0))]
        if values:
            values[draw(st.integers(0, len(values) - 1))] = draw(_floats(64))
    msg = JointState(name=names, position=values, velocity=draw(st.lists(_floats(64), max_size=12)))
    msg.header.stamp = draw(stamps())
    msg.header.frame_id = draw(_text(20))
    return msg


@st.composite
def images_like(draw, camera: str = "front"):
    from sensor_msgs.msg import Image

    encoding = draw(st.sampled_from(["rgb8", "bgr8", "rgba8", "bgra8", "mono8", "32FC1", "", "rgb16"]))
    height = draw(st.sampled_from([0, 1, 2, 95, 96, 97, 192, 2**31]) | st.integers(0, 300))
    width = draw(st.sampled_from([0, 1, 96, 192, 2**31]) | st.integers(0, 300))
    channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}.get(encoding, 3)
    step = draw(st.sampled_from([width * channels, width * channels + 4, 0, 2**32 - 1]) if width < 2**20
                else st.integers(0, 2**32 - 1))
    step = min(step, 2**32 - 1)
    size = height * step if height * step <= 200_000 else draw(st.integers(0, 1000))
    size += draw(st.sampled_from([0, 0, 0, 1, -1])) if size else 0
    msg = Image(height=min(height, 2**32 - 1), width=min(width, 2**32 - 1), encoding=encoding, step=step)
    msg.data = bytes(max(size, 0))
    msg.header.stamp = draw(stamps())
    msg.header.frame_id = draw(st.sampled_from([conv.optical_frame(camera), "", "wrist_camera_optical_frame",
                                                "front_camera_optical_frame", "map"]) | _text(30))
    return msg


def _json_values():
    return st.recursive(st.none() | st.booleans() | st.integers() | _floats(64) | st.text(max_size=20),
                        lambda children: st.lists(children, max_size=3)
                        | st.dictionaries(st.text(max_size=8), children, max_size=3), max_leaves=8)


@st.composite
def episode_json_like(draw):
    from std_msgs.msg import String

    fields = {"episode": 0, "seed": 0, "n_blocks": 3, "state": "running", "instruction": "put the red block in the box",
              "time": 0.0, "start": 1.0, "control_rate": 50, "camera_rate": 10}
    for key in draw(st.lists(st.sampled_from(sorted(fields)), max_size=3, unique=True)):
        if draw(st.booleans()):
            del fields[key]
        else:
            fields[key] = draw(_json_values())
    text = json.dumps(fields)  # NaN and Infinity come out as JavaScript literals, as a peer may send them
    if draw(st.integers(0, 5)) == 0:
        text = text[: draw(st.integers(0, len(text)))]  # truncated
    return String(data=text)


@st.composite
def markers_like(draw):
    from visualization_msgs.msg import Marker, MarkerArray

    array = MarkerArray()
    for i in range(draw(st.integers(0, 8))):
        marker = Marker(id=i, ns=draw(st.sampled_from(["block", "box", ""]) | _text(10)))
        marker.text = draw(st.sampled_from(["block0|red", "box|", "|", "a|b|c"]) | _text(30))
        for obj, names in ((marker.pose.position, "xyz"), (marker.pose.orientation, "xyzw"), (marker.scale, "xyz")):
            for name in names:
                setattr(obj, name, draw(st.floats(-1, 1) | _floats(64)))
        marker.header.stamp = draw(stamps())
        array.markers.append(marker)
    return array


def commands_like(length: int):
    from std_msgs.msg import Float64MultiArray

    values = st.lists(st.floats(-4, 4) | _floats(64), min_size=0, max_size=3 * length) \
        | st.lists(st.floats(-4, 4), min_size=length, max_size=length) \
        | st.lists(_floats(64), min_size=length, max_size=length)
    return values.map(lambda v: Float64MultiArray(data=v))


def clocks():
    from rosgraph_msgs.msg import Clock

    return stamps().map(lambda s: Clock(clock=s))


def random_array(n: int) -> list[float]:
    return np.random.default_rng(n).normal(size=n).tolist()
