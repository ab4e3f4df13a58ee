"""Message conversions: images in every supported encoding, bad sizes, NaN joints,
commands, the episode JSON and object markers."""
import dataclasses
import json

import numpy as np
import pytest
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String

from arm_act.ros import conversions as conv

pytestmark = pytest.mark.unit


def _image(rgb: np.ndarray, encoding: str, pad: int = 0) -> Image:
    if encoding == "rgb8":
        pixels = rgb
    elif encoding == "bgr8":
        pixels = rgb[:, :, ::-1]
    elif encoding == "rgba8":
        pixels = np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 255, np.uint8)], axis=2)
    elif encoding == "bgra8":
        pixels = np.concatenate([rgb[:, :, ::-1], np.full(rgb.shape[:2] + (1,), 255, np.uint8)], axis=2)
    else:
        pixels = rgb[:, :, :1]
    h, w, c = pixels.shape
    rows = np.zeros((h, w * c + pad), np.uint8)
    rows[:, : w * c] = pixels.reshape(h, w * c)
    return Image(height=h, width=w, encoding=encoding, step=w * c + pad, data=rows.tobytes())


@pytest.fixture
def rgb():
    return np.random.default_rng(0).integers(0, 256, size=(6, 5, 3), dtype=np.uint8)


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "bgra8"])
@pytest.mark.parametrize("pad", [0, 3])
def test_image_encodings_convert_to_rgb(rgb, encoding, pad):
    out = conv.image_from_msg(_image(rgb, encoding, pad))
    np.testing.assert_array_equal(out, rgb)
    assert out.dtype == np.uint8 and out.shape == rgb.shape


def test_mono8_is_replicated(rgb):
    out = conv.image_from_msg(_image(rgb, "mono8"))
    np.testing.assert_array_equal(out, np.repeat(rgb[:, :, :1], 3, axis=2))


def test_image_round_trip_and_zero_copy(rgb):
    msg = conv.image_msg(1.5, rgb, "front")
    assert msg.encoding == "rgb8" and msg.header.frame_id == "front_camera_optical_frame"
    assert conv.stamp_to_sec(msg.header.stamp) == 1.5
    out = conv.image_from_msg(msg)
    np.testing.assert_array_equal(out, rgb)
    assert not out.flags.writeable  # a view of the message buffer, not a copy


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda m: setattr(m, "encoding", "16UC1"), "unsupported image encoding"),
        (lambda m: setattr(m, "height", m.height + 1), "bytes, expected"),
        (lambda m: setattr(m, "step", 2), "step"),
        (lambda m: setattr(m, "width", 0), "empty image"),
    ],
)
def test_bad_images_raise_with_reason(rgb, mutate, reason):
    msg = conv.image_msg(0.0, rgb, "front")
    mutate(msg)
    with pytest.raises(conv.ConversionError, match=reason):
        conv.image_from_msg(msg)


def test_joint_positions_reorder_and_reject_nan():
    names = list(reversed(conv.JOINT_NAMES))
    msg = JointState(name=names, position=[float(i) for i in range(9)])
    out = conv.joint_positions_from_msg(msg)
    assert out.tolist() == [float(8 - i) for i in range(9)]
    msg.position = [float("nan")] + [0.0] * 8
    with pytest.raises(conv.ConversionError, match="non-finite"):
        conv.joint_positions_from_msg(msg)
    with pytest.raises(conv.ConversionError, match="lacks joints"):
        conv.joint_positions_from_msg(JointState(name=names[:3], position=[0.0] * 3))


@pytest.mark.parametrize("values, reason", [([0.0] * 6, "6 values"), ([0.0] * 6 + [float("inf")], "non-finite")])
def test_bad_commands_raise(values, reason):
    with pytest.raises(conv.ConversionError, match=reason):
        conv.command_from_msg(Float64MultiArray(data=values), 7, "arm")


def test_episode_json_round_trip_and_rejects_garbage():
    info = conv.EpisodeInfo(episode=3, seed=9, n_blocks=4, state="running", instruction="put the red block in the box",
                            time=0.0, start=12.34, control_rate=50, camera_rate=10)
    assert conv.episode_from_msg(conv.episode_msg(info)) == info
    assert info.tick_of(info.start_ns + 60_000_000) == 3
    assert info.is_camera_tick(5) and not info.is_camera_tick(3)
    with pytest.raises(conv.ConversionError):
        conv.episode_from_msg(String(data="{not json"))
    with pytest.raises(conv.ConversionError):
        conv.episode_from_msg(String(data='{"episode": 1}'))
    assert "colours" not in conv.episode_msg(info).data  # not stated: the message as before the field
    stated = dataclasses.replace(info, colours=("blue", "red"))
    assert conv.episode_from_msg(conv.episode_msg(stated)).colours == ("blue", "red")
    for bad in ('"red"', "[1, 2]", '[""]', json.dumps(["red"] * 17)):
        text = conv.episode_msg(info).data[:-1] + f', "colours": {bad}}}'
        with pytest.raises(conv.ConversionError, match="episode"):
            conv.episode_from_msg(String(data=text))


def test_objects_round_trip():
    obj = conv.ObjectMarker(name="block_red", kind="block", colour="red", rgba=(1.0, 0.0, 0.0, 1.0),
                            position=(0.4, 0.1, 0.02), orientation=(0.0, 0.0, 0.3826834323650898, 0.9238795325112867),
                            size=(0.04, 0.04, 0.04))
    (back,) = conv.objects_from_msg(conv.objects_msg(2.0, [obj]))
    assert (back.name, back.kind, back.colour) == ("block_red", "block", "red")
    np.testing.assert_array_equal(back.position, obj.position)  # float64 end to end: bit exact
    np.testing.assert_array_equal(back.orientation, obj.orientation)


def test_action_chunk_round_trip():
    chunk = np.random.default_rng(1).normal(size=(5, 8))
    msg = conv.action_chunk_msg(1.0, chunk, 0.02)
    assert len(msg.joint_names) == 9 and len(msg.points) == 5
    assert msg.points[-1].time_from_start.nanosec == 100_000_000
    np.testing.assert_array_equal(conv.action_chunk_from_msg(msg), chunk)


def test_attention_round_trip():
    grids = {"front": np.random.default_rng(0).random((6, 6)), "wrist": np.zeros((6, 6))}
    back = conv.attention_from_msg(conv.attention_msg(grids, ("front", "wrist")))
    np.testing.assert_allclose(back["front"], grids["front"], rtol=1e-6)
    assert set(back) == {"front", "wrist"}


@pytest.mark.parametrize("seconds", [1.0, 1.02, 12345.678901234])
def test_header_stamp_is_read_from_the_serialized_bytes(seconds):
    from rclpy.serialization import serialize_message

    image = conv.image_msg(seconds, np.zeros((8, 8, 3), np.uint8), "front")
    chunk = conv.action_chunk_msg(seconds, np.zeros((50, 8)), 0.02)
    for msg in (image, chunk):
        raw = serialize_message(msg)
        assert conv.header_stamp_ns(raw) == conv.stamp_to_ns(msg.header.stamp)


def test_header_stamp_of_bytes_that_are_no_message_is_a_conversion_error():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    for bad in (b"", b"\x00\x01\x00\x00\x01", b"\x07\x07" + bytes(20),
                b"\x00\x01\x00\x00" + (1).to_bytes(4, "little") + (2_000_000_000).to_bytes(4, "little")):
        with pytest.raises(conv.ConversionError):
            conv.header_stamp_ns(bad)

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=40))
    def fuzz(raw):
        try:
            assert conv.header_stamp_ns(raw) >= -(2**31) * 1_000_000_000
        except conv.ConversionError:
            pass

    fuzz()
