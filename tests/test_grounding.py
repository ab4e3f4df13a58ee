"""Grounding frames: rendered layouts labelled with the named block's position, cached, and
used by training for the target head only."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from arm_act.common.episodes import episode_spec
from arm_act.data.grounding import (
    GroundingFrame,
    approach_poses,
    label_demo_pixels,
    label_demo_pixels_cached,
    pixel_of,
    render_grounding_frames,
)
from arm_act.policy.config import PolicyConfig
from arm_act.policy.data import ChunkDataset, fit_normalizer
from arm_act.policy.train import TrainConfig, TrainingError, train
from arm_act.sim import ArmEnv, SimConfig
from arm_act.sim.robot import HOME

pytestmark = pytest.mark.unit

TINY = dict(image_size=96, patch_size=16, width=32, heads=2, encoder_layers=1, decoder_layers=1,
            chunk_size=5, mlp_ratio=2)


class _Demo:
    """A demonstration-shaped object (policy.data) with one resting and one lifted target."""

    def __init__(self, poses):
        self.instruction = "put the red block in the box"
        self.frame_ticks = np.array([0, 5], np.int64)
        self.images = np.zeros((2, 2, 96, 96, 3), np.uint8)
        self.frame_state = np.asarray(poses, np.float32)
        self.commands = np.zeros((10, 8), np.float32)
        self.frame_target = np.array([[0.4, 0.1, 0.02], [0.4, 0.1, 0.15]], np.float32)


BORROWED = HOME.copy()
BORROWED[:7] += np.array([0.3, 0.2, -0.1, 0.2, 0.0, -0.2, 0.1])


def test_approach_poses_keep_frames_whose_target_rests():
    poses = approach_poses([_Demo([BORROWED, HOME])], block_size=0.04)
    np.testing.assert_allclose(poses, BORROWED[None].astype(np.float32))


def test_frames_name_the_block_they_label_and_come_back_from_the_cache(tmp_path):
    frames = render_grounding_frames(4, 1_000_000, SimConfig(), poses=BORROWED[None], borrowed=0.5,
                                     cache_dir=tmp_path, progress=False)
    assert len(frames) == 4 and all(isinstance(f, GroundingFrame) and not f.has_actions for f in frames)
    with ArmEnv(SimConfig()) as env:
        for i, f in enumerate(frames):
            spec = episode_spec(i, 1_000_000, (2, 5))  # the layouts `arm-act collect` would draw
            assert f.seed == spec.seed
            env.reset(spec.seed, spec.n_blocks)
            assert f.instruction == env.instruction
            assert f.images.shape == (1, 2, 96, 96, 3) and f.images.dtype == np.uint8
            (named,) = [o for o in env.objects() if o.kind == "block" and o.colour == env.target_colour]
            np.testing.assert_allclose(f.frame_target[0], named.position, atol=1e-6)
            env.set_joint_positions(f.frame_state[0])
            front = env.camera("front").project(named.position[None])[0]
            np.testing.assert_allclose(f.target_uv[0, 0], front, atol=1e-3)  # the fixed camera sees every block
            assert f.target_uv.shape == (1, 2, 2)
    borrowed = [np.allclose(f.frame_state[0], BORROWED, atol=1e-5) for f in frames]
    assert 0 < sum(borrowed) < 4  # some borrowed the pose, some kept the start pose
    again = render_grounding_frames(4, 1_000_000, SimConfig(), poses=BORROWED[None], borrowed=0.5,
                                    cache_dir=tmp_path, progress=False)
    assert all(np.array_equal(a.images, b.images) and a.instruction == b.instruction
               for a, b in zip(frames, again, strict=True))
    (cached,) = tmp_path.glob("grounding-*.npz")
    cached.write_bytes(b"damaged")
    rebuilt = render_grounding_frames(4, 1_000_000, SimConfig(), poses=BORROWED[None], borrowed=0.5,
                                      cache_dir=tmp_path, progress=False)
    assert all(np.array_equal(a.images, b.images) for a, b in zip(frames, rebuilt, strict=True))


def test_near_hand_moves_the_named_block_beside_the_hand_and_keeps_the_rest(tmp_path):
    kwargs = dict(poses=BORROWED[None], borrowed=1.0, progress=False)
    plain = render_grounding_frames(8, 1_000_000, SimConfig(), **kwargs)
    near = render_grounding_frames(8, 1_000_000, SimConfig(), near_hand=1.0, cache_dir=tmp_path, **kwargs)
    with ArmEnv(SimConfig()) as env:
        env.reset(0, 2)
        env.set_joint_positions(BORROWED)
        hand = env.grasp_point()[:2]
    moved = 0
    for a, b in zip(plain, near, strict=True):
        assert a.seed == b.seed and a.instruction == b.instruction  # the same layouts and poses
        np.testing.assert_array_equal(a.frame_state, b.frame_state)
        gap = float(np.linalg.norm(b.frame_target[0, :2] - hand))
        if not np.allclose(a.frame_target, b.frame_target):
            moved += 1
            assert 0.02 - 1e-6 <= gap <= 0.07 + 1e-6  # beside the hand, where the label says
            assert b.frame_target[0, 2] == pytest.approx(a.frame_target[0, 2])  # still resting on the table
            assert not np.array_equal(a.images, b.images)
    assert moved >= 6  # (a layout where no direction is clear keeps its block)
    assert len(list(tmp_path.glob("grounding-*.npz"))) == 1
    other = render_grounding_frames(8, 1_000_000, SimConfig(), near_hand=0.5, cache_dir=tmp_path, **kwargs)
    assert len(list(tmp_path.glob("grounding-*.npz"))) == 2  # its own cache entry
    assert sum(not np.allclose(a.frame_target, o.frame_target) for a, o in zip(plain, other, strict=True)) < moved
    with pytest.raises(ValueError, match="grounding_near_hand"):
        TrainConfig(grounding_near_hand=1.5)


@pytest.mark.slow
def test_a_split_between_processes_renders_the_same_frames(tmp_path, monkeypatch, caplog):
    # Process 1 of 2 renders layouts 1, 3, 5 into its part file. Its partner never delivers
    # (nothing new for the stall time): it renders the rest itself. Every frame equals the
    # one-process rendering, and a later run of any split reads the parts from the cache.
    from arm_act.common import shares

    monkeypatch.setattr(shares, "STALL_S", 0.0)
    kwargs = dict(poses=BORROWED[None], borrowed=0.5, progress=False)
    whole = render_grounding_frames(7, 1_000_000, SimConfig(), **kwargs)
    with caplog.at_level("INFO"):
        split = render_grounding_frames(7, 1_000_000, SimConfig(), cache_dir=tmp_path, share=(1, 2), **kwargs)
    assert "process 1 of 2 renders 3 of the 7 grounding layouts" in caplog.text
    assert "1 grounding shares from the other processes did not arrive" in caplog.text
    assert sorted(p.name.split(".", 1)[1] for p in tmp_path.glob("grounding-*")) == ["part0of2.npz", "part1of2.npz"]
    caplog.clear()
    with caplog.at_level("INFO"):
        again = render_grounding_frames(7, 1_000_000, SimConfig(), cache_dir=tmp_path, share=(0, 1), **kwargs)
    assert "7 grounding frames from the cache" in caplog.text
    for a, b, c in zip(whole, split, again, strict=True):
        assert a.seed == b.seed == c.seed and a.instruction == b.instruction == c.instruction
        for name in ("images", "frame_state", "frame_target", "target_uv"):
            assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=name == "target_uv")
            assert np.array_equal(getattr(a, name), getattr(c, name), equal_nan=name == "target_uv")
    # Fewer layouts than processes: each renders them all.
    (one,) = render_grounding_frames(1, 1_000_000, SimConfig(), cache_dir=tmp_path / "one", share=(1, 2), **kwargs)
    assert np.array_equal(one.images, whole[0].images)
    # A damaged part is rendered again.
    next(tmp_path.glob("grounding-*.part0of2.npz")).write_bytes(b"damaged")
    rebuilt = render_grounding_frames(7, 1_000_000, SimConfig(), cache_dir=tmp_path, share=(1, 2), **kwargs)
    assert all(np.array_equal(a.images, b.images) for a, b in zip(whole, rebuilt, strict=True))


def test_demonstration_frames_get_the_pixels_of_the_named_block():
    demo = _Demo([HOME, BORROWED])
    demo.frame_target = np.array([[0.45, 0.05, 0.02], [np.nan, np.nan, np.nan]], np.float32)
    label_demo_pixels([demo], SimConfig())
    assert demo.target_uv.shape == (2, 2, 2) and np.isnan(demo.target_uv[1]).all()
    # The place (where the block rests at the end: its last known position) in the same frames.
    assert demo.place_uv.shape == (2, 2, 2) and np.isnan(demo.place_uv[1]).all()
    np.testing.assert_allclose(demo.place_uv[0], demo.target_uv[0], atol=1e-3)  # the last known is frame 0's
    with ArmEnv(SimConfig()) as env:
        env.reset(3, 2)
        env.set_joint_positions(HOME)
        for c, name in enumerate(("front", "wrist")):
            expected = pixel_of(env.camera(name), np.array([0.45, 0.05, 0.02]))
            np.testing.assert_allclose(demo.target_uv[0, c], expected, atol=1e-3)
        assert np.all(np.isfinite(demo.target_uv[0]))  # both cameras see the table centre at the start
        behind = pixel_of(env.camera("front"), np.array([2.0, 0.0, 0.5]))  # behind the front camera
        assert np.isnan(behind).all()


def test_pixel_labels_come_back_from_the_cache_and_a_split_labels_each_episode_once(tmp_path, caplog):
    def demos():
        out = [_Demo([HOME, BORROWED]), _Demo([BORROWED, HOME]), _Demo([HOME, HOME])]
        out[0].frame_target = np.array([[0.45, 0.05, 0.02], [np.nan, np.nan, np.nan]], np.float32)
        out[2].frame_target = np.array([[0.35, -0.1, 0.02], [0.35, -0.1, 0.02]], np.float32)
        return out

    direct = demos()
    label_demo_pixels(direct, SimConfig())

    def same(labelled, expected=direct):
        for a, b in zip(expected, labelled, strict=True):
            np.testing.assert_array_equal(a.target_uv, b.target_uv)
            np.testing.assert_array_equal(a.place_uv, b.place_uv)

    # One process labels two of them into the cache.
    first = demos()
    assert label_demo_pixels_cached(first[0::2], SimConfig(), tmp_path, share=(0, 1)) == 2
    same(first[0::2], direct[0::2])
    # Process 1 of 2 labels its share (episode 1) and reads its partner's (0 and 2) from the cache.
    split = demos()
    assert label_demo_pixels_cached(split, SimConfig(), tmp_path, share=(1, 2), stall_s=0.0) == 1
    same(split)
    assert len(list((tmp_path / "pixels").glob("*.npz"))) == 3
    # Any split later reads them all; a partner that never delivers costs the stall time, then
    # the waiting process labels the rest itself.
    again = demos()
    assert label_demo_pixels_cached(again, SimConfig(), tmp_path, share=(0, 2)) == 0
    same(again)
    alone = demos()
    assert label_demo_pixels_cached(alone, SimConfig(), tmp_path / "other", share=(1, 2), stall_s=0.0) == 3
    same(alone)
    # A damaged file and one of the wrong shape are labelled again, with a warning each.
    files = sorted((tmp_path / "pixels").glob("*.npz"))
    files[0].write_bytes(b"damaged")
    np.savez(files[1], target_uv=np.zeros((5, 2, 2), np.float32), place_uv=np.zeros((5, 2, 2), np.float32))
    mended = demos()
    with caplog.at_level("WARNING"):
        assert label_demo_pixels_cached(mended, SimConfig(), tmp_path, share=(0, 1)) == 2
    assert "unreadable" in caplog.text and "have shape (5, 2, 2), not (2, 2, 2)" in caplog.text
    same(mended)
    # An episode whose frames differ is a different entry, never another episode's labels.
    moved = demos()
    moved[1].frame_state = moved[1].frame_state + np.float32(0.01)
    assert label_demo_pixels_cached(moved, SimConfig(), tmp_path, share=(0, 1)) == 1


def test_bad_requests_are_clear_errors():
    with pytest.raises(ValueError, match="no demonstration frame"):
        render_grounding_frames(2, 1_000_000, SimConfig(), poses=np.zeros((0, 9)), borrowed=0.5)
    with ArmEnv(SimConfig()) as env:
        env.reset(0, 2)
        with pytest.raises(ValueError, match="9 finite"):
            env.set_joint_positions(np.full(9, np.nan))


def test_training_uses_grounding_frames_for_the_target_head_only(tmp_path):
    frames = render_grounding_frames(6, 1_000_000, SimConfig(), borrowed=0.0, progress=False)
    demos = [_Demo([HOME, HOME]) for _ in range(3)]
    cfg = PolicyConfig(**TINY, target_weight=1.0)
    data = ChunkDataset(demos + frames, cfg, fit_normalizer(demos))
    batch = data.batch(torch.arange(len(data)))
    assert batch["action_mask"][:6].all() and not batch["action_mask"][6:].any()
    torch.testing.assert_close(batch["target"][6:], torch.from_numpy(np.concatenate([f.frame_target for f in frames])))
    # The place head's label: each demonstration's last position, on every one of its frames;
    # unknown (NaN) for the grounding frames, which show a layout and demonstrate no place.
    torch.testing.assert_close(batch["place"][:6], torch.tensor([[0.4, 0.1, 0.15]]).expand(6, 3))
    assert torch.isnan(batch["place"][6:]).all() and (batch["place_patch"] == -1).all()
    fast = TrainConfig(steps=2, batch_size=4, warmup_steps=1, val_every=1, checkpoint_every=2, val_fraction=0.34)
    metrics = train(demos, cfg, fast, tmp_path / "ckpt", progress=False, grounding=frames)
    assert metrics["data"]["grounding_frames"] == 6 and metrics["data"]["grounding_val_frames"] == 2
    assert metrics["data"]["train_episodes"] == 2 and metrics["final"]["val_grounding_cm"] > 0
    with pytest.raises(TrainingError, match="target_weight"):
        train(demos, PolicyConfig(**TINY), fast, tmp_path / "plain", progress=False, grounding=frames)
