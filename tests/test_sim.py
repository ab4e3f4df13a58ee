"""Tests of the PyBullet world (real PyBullet, DIRECT): layout, determinism, cameras,
commands, success checks on constructed states, lifecycle (dm_control suite_test style)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from arm_act.sim import COLOURS, JOINT_NAMES, ArmEnv, CameraConfig, SimConfig
from arm_act.sim.config import default_cameras
from arm_act.sim.task import BOX_WALL

pytestmark = pytest.mark.unit

CFG = SimConfig()


@pytest.fixture
def env():
    e = ArmEnv(CFG)
    yield e
    e.close()


def _drive(env: ArmEnv, seed: int, ticks: int = 25) -> tuple[list[np.ndarray], list[dict[str, np.ndarray]]]:
    """Reset and follow a fixed joint-space wiggle; returns joint positions and frames."""
    env.reset(seed=seed, n_blocks=4)
    q0 = env.joint_state().position[:7].copy()
    positions, frames = [], [env.render()]
    for k in range(ticks):
        env.apply_command(q0 + 0.2 * np.sin(0.2 * k + np.arange(7)), 0.02)
        env.step()
        positions.append(env.joint_state().position)
    frames.append(env.render())
    return positions, frames


@pytest.mark.parametrize("seed", [0, 11])
def test_same_seed_bit_identical(seed):
    a, b = ArmEnv(CFG), ArmEnv(CFG)
    try:
        _drive(b, seed + 1)  # b has already run another episode: no state may leak
        pa, fa = _drive(a, seed)
        pb, fb = _drive(b, seed)
    finally:
        a.close()
        b.close()
    assert all(np.array_equal(x, y) for x, y in zip(pa, pb, strict=True))
    for x, y in zip(fa, fb, strict=True):
        assert all(np.array_equal(x[name], y[name]) for name in x)


def test_reset_randomizes(env):
    layouts, targets = set(), set()
    for seed in range(6):
        env.reset(seed=seed, n_blocks=4)
        layouts.add(tuple(np.round(np.concatenate([o.position for o in env.objects()]), 4)))
        targets.add(env.target_colour)
    assert len(layouts) == 6
    assert len(targets) > 1


@pytest.mark.parametrize("n_blocks", [2, 3, 4, 5, 6])
def test_layout_valid(env, n_blocks):
    for seed in range(4):
        env.reset(seed=seed, n_blocks=n_blocks)
        blocks = [o for o in env.objects() if o.kind == "block"]
        (box,) = [o for o in env.objects() if o.kind == "box"]
        colours = [b.colour for b in blocks]
        assert len(blocks) == n_blocks and len(set(colours)) == n_blocks
        assert set(colours) <= set(COLOURS)
        assert env.target_colour in colours
        assert env.instruction == f"put the {env.target_colour} block in the box"
        x0, x1, y0, y1 = CFG.block_region
        for blk in blocks:
            assert blk.name == f"block_{blk.colour}"
            assert x0 <= blk.position[0] <= x1 and y0 <= blk.position[1] <= y1
            assert np.hypot(*blk.position[:2]) < 0.75  # inside the Panda's top-down reach
            # Not overlapping the box: block and box footprints are disjoint.
            gap = np.abs(blk.position[:2] - box.position[:2]) - (box.size[:2] + blk.size[:2]) / 2
            assert gap.max() > 0.02
        for a, b in itertools.combinations(blocks, 2):
            assert np.linalg.norm(a.position[:2] - b.position[:2]) >= CFG.min_block_spacing


def test_joint_state_and_objects(env):
    env.reset(seed=3, n_blocks=3)
    js = env.joint_state()
    assert js.names == JOINT_NAMES
    for arr in (js.position, js.velocity, js.effort):
        assert arr.shape == (9,) and arr.dtype == np.float64
    for obj in env.objects():
        assert obj.position.shape == (3,) and obj.orientation.shape == (4,)
        assert obj.size.shape == (3,) and obj.rgba.shape == (4,)
        assert abs(np.linalg.norm(obj.orientation) - 1) < 1e-6
    assert env.time == 0.0 and env.tick == 0
    env.step()
    assert env.tick == 1 and env.time == pytest.approx(CFG.control_dt)


def test_render_shapes_and_fresh_arrays(env):
    env.reset(seed=0, n_blocks=2)
    a, b = env.render(), env.render()
    assert list(a) == [c.name for c in CFG.cameras] == ["front", "wrist"]
    for name, img in a.items():
        cam = CFG.camera(name)
        assert img.shape == (cam.height, cam.width, 3) and img.dtype == np.uint8
        assert img.flags["C_CONTIGUOUS"] and img.std() > 5  # not a blank frame
        assert not np.shares_memory(img, b[name])
        img[:] = 0
        assert b[name].any()
    js1, js2 = env.joint_state(), env.joint_state()
    assert not np.shares_memory(js1.position, js2.position)
    o1, o2 = env.objects(), env.objects()
    o1[0].position[:] = 99.0
    assert o2[0].position[0] != 99.0 and env.objects()[0].position[0] != 99.0


def _render_cameras() -> list[CameraConfig]:
    top = CameraConfig(name="top", eye=(0.45, 0.05, 0.9), target=(0.45, 0.05, 0.0), up=(1.0, 0.0, 0.0),
                       fov_deg=40.0, width=128, height=96)
    return [default_cameras()[0], top]


@pytest.mark.parametrize("cam_cfg", _render_cameras(), ids=lambda c: c.name)
def test_intrinsics_match_rendered_pixels(cam_cfg):
    """Project a block's top-face centre with K and the camera pose, and find it rendered."""
    env = ArmEnv(SimConfig(cameras=(cam_cfg,)))
    try:
        env.reset(seed=0, n_blocks=2)
        K = env.camera_intrinsics(cam_cfg.name)
        fy = cam_cfg.height / 2 / np.tan(np.radians(cam_cfg.fov_deg) / 2)
        np.testing.assert_allclose(K, [[fy, 0, cam_cfg.width / 2], [0, fy, cam_cfg.height / 2], [0, 0, 1]])
        target, other = [o.colour for o in env.objects() if o.kind == "block"]
        env.place_block(other, np.array([0.0, 0.6, -0.5]))  # out of view
        centre = np.array([0.52, 0.12, 0.02])
        env.place_block(target, centre)
        img = env.render()[cam_cfg.name].astype(int)
        rgba = np.array([o.rgba for o in env.objects() if o.colour == target][0][:3]) * 255
        # Top face only (lit brightest) to avoid the side faces biasing the centroid.
        dist = np.abs(img - rgba).sum(axis=2)
        vs, us = np.nonzero(dist < 60)
        assert len(us) >= 4, "block not rendered"
        top_centre = centre + np.array([0.0, 0.0, CFG.block_size / 2])
        T = env.camera(cam_cfg.name).world_to_optical()
        p = T[:3, :3] @ top_centre + T[:3, 3]
        u, v = (K @ p)[:2] / p[2]
        # Pixel (i, j) covers continuous coordinates [j, j+1) x [i, i+1): centres at +0.5.
        assert abs(us.mean() + 0.5 - u) < 1.5 and abs(vs.mean() + 0.5 - v) < 2.0
    finally:
        env.close()


def _box_floor_z() -> float:
    return BOX_WALL + CFG.block_size / 2


@pytest.mark.parametrize("case,expected", [
    ("target_in_box", "success"),
    ("gripper_closed", "running"),
    ("above_rim", "running"),
    ("wrong_block_in_box", "failure"),
    ("both_in_box", "failure"),
    ("fell_off_table", "failure"),
    ("untouched", "running"),
])
def test_status_on_constructed_states(env, case, expected):
    env.reset(seed=5, n_blocks=3)
    target = env.target_colour
    other = next(c for c in (o.colour for o in env.objects() if o.kind == "block") if c != target)
    bx, by = CFG.box_center
    inside = np.array([bx, by, _box_floor_z()])
    if case in ("target_in_box", "gripper_closed", "both_in_box"):
        env.place_block(target, inside + [0.03, 0.0, 0.0])
    if case == "gripper_closed":
        env.set_gripper(0.0)
    if case == "above_rim":
        env.place_block(target, inside + [0.0, 0.0, CFG.box_wall_height])
    if case in ("wrong_block_in_box", "both_in_box"):
        env.place_block(other, inside - [0.03, 0.0, 0.0])
    if case == "fell_off_table":
        env.place_block(other, np.array([1.2, 0.0, -0.3]))
    assert env.status() == expected
    if expected == "success":  # stays a success once the block has settled
        for _ in range(10):
            env.step()
        assert env.status() == "success"


def test_timeout():
    env = ArmEnv(SimConfig(episode_time_limit=0.1))
    try:
        env.reset(seed=0, n_blocks=2)
        statuses = []
        for _ in range(5):
            statuses.append(env.status())
            env.step()
        assert statuses == ["running"] * 5 and env.status() == "timeout"
    finally:
        env.close()


@pytest.mark.parametrize("arm,gripper", [
    (np.zeros(6), 0.02), (np.zeros(8), 0.02), (np.full(7, np.nan), 0.02), (np.zeros(7), np.inf),
    (np.zeros(7), [0.01, 0.02]),
])
def test_apply_command_rejects_bad_input(env, arm, gripper):
    env.reset(seed=0, n_blocks=2)
    before = env.joint_state().position
    with pytest.raises(ValueError):
        env.apply_command(arm, gripper)
    env.step()
    np.testing.assert_allclose(env.joint_state().position, before, atol=2e-3)  # nothing applied


def test_apply_command_clamps_to_limits(env):
    env.reset(seed=0, n_blocks=2)
    arm = env.joint_state().position[:7].copy()
    arm[0], arm[3] = 10.0, 5.0  # joint1 upper 2.9671, joint4 upper 0.0
    env.apply_command(arm, 1.0)  # gripper limit 0.04
    for _ in range(100):
        env.step()
    q = env.joint_state().position
    assert 2.8 < q[0] <= 2.9671 + 1e-3
    assert -0.1 < q[3] <= 1e-3
    assert np.all(q[7:] <= 0.04 + 1e-4) and np.all(q[7:] > 0.035)


def test_close_twice_and_use_after_close():
    env = ArmEnv(CFG)
    env.reset(seed=0, n_blocks=2)
    env.close()
    env.close()
    with pytest.raises(RuntimeError):
        env.step()


def test_two_envs_do_not_interfere():
    a, b, ref = ArmEnv(CFG), ArmEnv(CFG), ArmEnv(CFG)
    try:
        a.reset(seed=1, n_blocks=3)
        b.reset(seed=2, n_blocks=5)
        ref.reset(seed=2, n_blocks=5)
        target = a.joint_state().position[:7] + 0.3
        for _ in range(20):  # interleave: a moves, b and ref hold still
            a.apply_command(target, 0.0)
            a.step()
            b.step()
            ref.step()
        assert np.array_equal(b.joint_state().position, ref.joint_state().position)
        assert not np.allclose(a.joint_state().position[:7], b.joint_state().position[:7])
        assert [o.name for o in b.objects()] == [o.name for o in ref.objects()]
    finally:
        for e in (a, b, ref):
            e.close()


@pytest.mark.parametrize("kwargs", [
    {"camera_rate_hz": 7}, {"control_rate_hz": 0}, {"physics_rate_hz": 0.0}, {"n_blocks_range": (2, 7)},
    {"min_block_spacing": 0.01}, {"episode_time_limit": 0.0},
])
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        SimConfig(**kwargs)


@pytest.mark.parametrize("rate,substeps", [(50, 10), (100, 5), (30, 17), (20, 25)])
def test_physics_step_divides_control_period(rate, substeps):
    cfg = SimConfig(control_rate_hz=rate, camera_rate_hz=10 if rate % 10 == 0 else rate)
    assert cfg.physics_substeps == substeps
    assert cfg.physics_dt * substeps == pytest.approx(1.0 / rate)


def test_camera_config_validation():
    with pytest.raises(ValueError, match="mount"):
        CameraConfig(name="x", mount="tripod")
    with pytest.raises(ValueError, match="link"):
        CameraConfig(name="x", mount="link")
    with pytest.raises(ValueError, match="fov"):
        CameraConfig(name="x", fov_deg=0.0)


def test_reset_rejects_bad_block_count(env):
    with pytest.raises(ValueError, match="n_blocks"):
        env.reset(seed=0, n_blocks=7)
