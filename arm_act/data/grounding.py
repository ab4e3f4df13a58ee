"""Grounding frames: rendered layouts that teach the target head where the named block is.

In the demonstrations, the arm heads for the named block from the first camera pair on, so
after a few frames the joint state (and the arm in the images) gives the target away; a
policy trained on them alone learns to follow its own motion and never learns to look
(measured: docs/training.md, "Finding the named block"). Grounding frames break that shortcut: each is
a fresh layout (seeds from TrainConfig.grounding_seed on, never used by collect or eval),
rendered with the arm at its start pose or, for a fraction, in a pose borrowed from another
demonstration, labelled only with the named block's position. They have no actions: the
action loss ignores them (policy.data.ChunkDataset, has_actions=False).

Beside the hand: in the demonstrations the hand is over the named block whenever it is low,
so the target head can also learn "the block is under the hand". After a missed grasp (the
push world) that guess keeps every retry where the hand already is. For a fraction of the
borrowed-pose layouts (TrainConfig.grounding_near_hand), the named block is moved to 2-7 cm
beside the hand before rendering, so the hand's place says nothing about the block's.

Rendering costs ~20 ms per layout; the frames are cached as one .npz in the training cache,
keyed by everything they depend on (under torchrun, one part file per process, each with
every N-th layout). The demonstrations' pixel labels are cached there too, one file per
episode (label_demo_pixels_cached).
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arm_act.common.progress import progress_bar
from arm_act.policy.data import final_place
from arm_act.sim import ArmEnv

logger = logging.getLogger(__name__)

GROUNDING_VERSION = 2  # 2: target_uv
PIXELS_VERSION = 1  # label_demo_pixels_cached's files
NEAR_HAND_M = (0.02, 0.07)  # m: how far from the hand _beside_hand puts the named block
RESTING_TOLERANCE = 0.005  # m: a block whose centre is within this of its resting height


@dataclass
class GroundingFrame:
    """One rendered layout in the shape policy.data expects of an episode (one frame, no
    actions). images (1, C, H, W, 3) uint8; frame_state (1, 9); frame_target (1, 3) m;
    target_uv (1, C, 2): the named block's centre in each camera's pixels (u right, v
    down), NaN where it is outside the image."""

    instruction: str
    images: np.ndarray
    frame_state: np.ndarray
    frame_target: np.ndarray
    target_uv: np.ndarray
    seed: int
    has_actions: bool = False

    @property
    def frame_ticks(self) -> np.ndarray:
        return np.zeros(1, np.int64)

    @property
    def commands(self) -> np.ndarray:
        """A placeholder tick (the pose itself); never a training target (has_actions)."""
        state = self.frame_state[0]
        return np.concatenate([state[:7], state[7:8]])[None].astype(np.float32)

    @property
    def n_frames(self) -> int:
        return 1


def pixel_of(camera, point: np.ndarray) -> np.ndarray:
    """(u, v) of a world point in a sim camera's image, NaN when behind it or outside."""
    T = camera.world_to_optical()
    depth = float((T[:3, :3] @ point + T[:3, 3])[2])
    uv = camera.project(point[None])[0]
    cfg = camera.config
    if depth <= 0 or not (0 <= uv[0] < cfg.width and 0 <= uv[1] < cfg.height):
        return np.full(2, np.nan, np.float32)
    return uv.astype(np.float32)


def approach_poses(episodes, block_size: float) -> np.ndarray:
    """(M, 9) joint states of demonstration frames in which the named block still rests on
    the table (the arm at its start or on its way there): the poses grounding frames borrow."""
    rows = []
    for e in episodes:
        target = np.asarray(e.frame_target)
        resting = np.isfinite(target).all(axis=1) & (np.abs(target[:, 2] - block_size / 2) < RESTING_TOLERANCE)
        rows.append(np.asarray(e.frame_state, np.float32)[resting])
    return np.concatenate(rows) if rows else np.zeros((0, 9), np.float32)


def label_demo_pixels(episodes, sim_config) -> None:
    """Set `target_uv` and `place_uv` (F, C, 2) on each demonstration: the named block's centre
    and the place where it ends (policy.data.final_place) in each camera's pixels at each
    frame (the arm posed as the frame's joint state, so the wrist camera is where it was),
    NaN where the point is outside an image or unknown."""
    cameras = tuple(c.name for c in sim_config.cameras)
    with ArmEnv(sim_config) as env:
        env.reset(0, sim_config.n_blocks_range[0])
        for e in episodes:
            target = np.asarray(e.frame_target, np.float64)
            place = final_place(target).astype(np.float64)
            uv = np.full((len(target), len(cameras), 2), np.nan, np.float32)
            place_uv = np.full_like(uv, np.nan)
            for i, (state, point) in enumerate(zip(np.asarray(e.frame_state, np.float64), target, strict=True)):
                if np.all(np.isfinite(point)):
                    env.set_joint_positions(state)
                    uv[i] = [pixel_of(env.camera(c), point) for c in cameras]
                    if np.all(np.isfinite(place)):
                        place_uv[i] = [pixel_of(env.camera(c), place) for c in cameras]
            e.target_uv = uv
            e.place_uv = place_uv


def label_demo_pixels_cached(episodes, sim_config, cache_dir: str | os.PathLike, *,
                             share: tuple[int, int] | None = None, stall_s: float | None = None) -> int:
    """label_demo_pixels through a cache: one file per episode under cache_dir/pixels/, keyed
    by what the labels depend on (the frames' joint states and block positions, the sim
    config), so the pipeline's later stages label only their new episodes. Data-parallel
    processes on one machine split the episodes the cache lacks (share: (rank, size), default
    torchrun's; arm_act.common.shares): each labels every size-th, then reads the others'.
    The labels are the same either way. -> how many episodes this process labelled."""
    from arm_act.common.shares import STALL_S, local_share, wait_for_others

    rank, size = share or local_share()
    folder = Path(cache_dir) / "pixels"
    paths = [folder / f"{_pixels_key(e, sim_config)}.npz" for e in episodes]
    labels: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def label_here(indices: list[int]) -> None:
        if not indices:
            return
        todo = [episodes[i] for i in indices]
        label_demo_pixels(todo, sim_config)
        for i, e in zip(indices, todo, strict=True):
            labels[i] = (e.target_uv, e.place_uv)
            _save_pixels(paths[i], e.target_uv, e.place_uv)

    def cached(i: int) -> bool:
        if i not in labels:
            found = _load_pixels(paths[i], len(episodes[i].frame_target), len(sim_config.cameras))
            if found is not None:
                labels[i] = found
        return i in labels

    mine = [i for i in range(rank, len(episodes), max(size, 1)) if not cached(i)]
    label_here(mine)
    theirs = [i for i in range(len(episodes)) if not cached(i)]
    if theirs and size > 1:
        started = time.monotonic()
        theirs = wait_for_others(theirs, cached, "labelled episodes",
                                 stall_s=STALL_S if stall_s is None else stall_s)
        logger.debug("waited %.0f s for the other processes' pixel labels", time.monotonic() - started)
    label_here([i for i in theirs if not cached(i)])
    for i, e in enumerate(episodes):
        e.target_uv, e.place_uv = labels[i]
    return len(mine) + len(theirs)


def _pixels_key(episode, sim_config) -> str:
    h = hashlib.sha256(json.dumps({"version": PIXELS_VERSION, "sim": repr(sim_config)}).encode())
    for array in (episode.frame_state, episode.frame_target):
        array = np.ascontiguousarray(array, np.float64)
        h.update(repr(array.shape).encode())
        h.update(array.tobytes())
    return h.hexdigest()[:24]


def _save_pixels(path: Path, target_uv: np.ndarray, place_uv: np.ndarray) -> None:
    """Written beside its place and renamed in, so a reader sees a whole file or none."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            np.savez(f, target_uv=target_uv, place_uv=place_uv)
        os.replace(tmp, path)
    except OSError as exc:
        logger.warning("cannot write the pixel labels %s: %s", path, exc)
    finally:
        tmp.unlink(missing_ok=True)


def _load_pixels(path: Path, n_frames: int, n_cameras: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(target_uv, place_uv) from a cache file of the expected shape; None when it is
    missing or damaged (the episode is labelled again)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            found = data["target_uv"], data["place_uv"]
    except Exception as exc:  # noqa: BLE001 - a damaged cache file is labelled again
        logger.warning("pixel labels %s are unreadable (%s: %s); labelling again", path, type(exc).__name__, exc)
        return None
    if any(a.shape != (n_frames, n_cameras, 2) for a in found):
        logger.warning("pixel labels %s have shape %s, not (%d, %d, 2); labelling again", path,
                       found[0].shape, n_frames, n_cameras)
        return None
    return found


def _key(n: int, seed: int, blocks: tuple[int, int], borrowed: float, sim_config, poses: np.ndarray,
         task: str, near_hand: float = 0.0) -> str:
    h = hashlib.sha256()
    fields = {"version": GROUNDING_VERSION, "n": n, "seed": seed, "blocks": list(blocks),
              "borrowed": borrowed, "sim": repr(sim_config)}
    if task != "box":  # box keys stay as they were, so existing caches are still found
        fields["task"] = task
    if near_hand:  # 0 keeps the keys of caches made before the option existed
        fields["near_hand"] = near_hand
    h.update(json.dumps(fields, sort_keys=True).encode())
    h.update(np.ascontiguousarray(poses, dtype=np.float32).tobytes())
    return h.hexdigest()[:16]


def render_grounding_frames(n: int, seed: int, sim_config, *, blocks: tuple[int, int] = (2, 5),
                            poses: np.ndarray | None = None, borrowed: float = 0.5,
                            cache_dir: str | os.PathLike | None = None,
                            progress: bool | None = None,
                            share: tuple[int, int] | None = None, task: str = "box",
                            near_hand: float = 0.0) -> list[GroundingFrame]:
    """n grounding frames from layouts seed, seed+1, ... (block counts as `arm-act collect`
    draws them), cached in cache_dir. poses: (M, 9) joint states to borrow for a fraction
    `borrowed` of the frames (the rest keep the start pose). task: the goal family of the
    layouts' instructions (box | stack | relation | mix); the label is always the block to move.
    near_hand: the fraction of the borrowed-pose frames whose named block is moved beside the
    hand (_beside_hand).

    With a cache_dir, data-parallel processes on one machine split the rendering (share:
    (rank, size), default torchrun's local rank and process count; arm_act.common.shares):
    each renders every size-th layout into its own part file, then reads the others'. The
    frames are the same whatever the split: the pose draws are made first, in one order."""
    from arm_act.common.shares import STALL_S, local_share, wait_for_others

    if n < 0:
        raise ValueError(f"n={n} must be >= 0")
    poses = np.zeros((0, 9), np.float32) if poses is None else np.asarray(poses, np.float32)
    if borrowed > 0 and len(poses) == 0:
        raise ValueError("borrowed poses asked for, but no demonstration frame has the named block at rest")
    if n == 0:
        return []
    rng = np.random.default_rng([seed, 11])
    picks = [int(rng.integers(len(poses))) if rng.random() < borrowed else -1 for _ in range(n)]
    # Drawn after the picks, from a stream of their own, so the picks are the same with or
    # without it: per layout, None or (distance m, angle rad) of the named block from the hand.
    near_rng = np.random.default_rng([seed, 12])
    beside = [(float(near_rng.uniform(*NEAR_HAND_M)), float(near_rng.uniform(0, 2 * np.pi)))
              if pick >= 0 and near_rng.random() < near_hand else None for pick in picks]
    render = functools.partial(_render, seed=seed, sim_config=sim_config, blocks=blocks, poses=poses, picks=picks,
                               task=task, beside=beside)
    if cache_dir is None:
        return render(range(n), progress=progress)
    path = Path(cache_dir) / f"grounding-{_key(n, seed, blocks, borrowed, sim_config, poses, task, near_hand)}.npz"
    frames = _load(path) if path.is_file() else _load_parts(path, n)
    if frames is not None:
        logger.info("%d grounding frames from the cache %s", len(frames), path)
        return frames
    rank, size = share or local_share()
    if size <= 1 or n < size:  # (fewer layouts than processes: each renders them all)
        frames = render(range(n), progress=progress)
        _save_or_warn(path, frames)
        return frames
    started = time.monotonic()
    parts = {rank: _load(_part_path(path, rank, size)) if _part_path(path, rank, size).is_file() else None}
    if parts[rank] is None:
        logger.info("process %d of %d renders %d of the %d grounding layouts (every %d-th)", rank, size,
                    len(range(rank, n, size)), n, size)
        parts[rank] = render(range(rank, n, size), progress=progress)
        _save_or_warn(_part_path(path, rank, size), parts[rank])
    others = [r for r in range(size) if r != rank]
    # A share arrives whole, at its end, so wait as long as three times this one took.
    missing = wait_for_others(others, lambda r: _part_path(path, r, size).is_file(), "grounding shares",
                              stall_s=max(STALL_S, 3 * (time.monotonic() - started)))
    for r in others:
        part = None if r in missing else _load(_part_path(path, r, size))
        if part is None or len(part) != len(range(r, n, size)):
            part = render(range(r, n, size), progress=progress)
            _save_or_warn(_part_path(path, r, size), part)
        parts[r] = part
    return [parts[i % size][i // size] for i in range(n)]


def _beside_hand(env, distance: float, angle: float) -> bool:
    """Move the named block to `distance` from the hand's grasp point, horizontally, at
    `angle` or the first of the next seven eighths of a turn where it stays in the block
    region and 1.5 block sizes clear of the other blocks. False (nothing moved) where no direction fits."""
    cfg = env.config
    x0, x1, y0, y1 = cfg.block_region
    hand = env.grasp_point()[:2]
    named = next(o for o in env.objects() if o.kind == "block" and o.colour == env.target_colour)
    others = [np.asarray(o.position[:2]) for o in env.objects() if o.kind == "block" and o.colour != env.target_colour]
    for turn in range(8):
        a = angle + turn * np.pi / 4
        xy = hand + distance * np.array([np.cos(a), np.sin(a)])
        if x0 <= xy[0] <= x1 and y0 <= xy[1] <= y1 and \
                all(np.linalg.norm(xy - o) >= 1.5 * cfg.block_size for o in others):
            x, y, z, w = named.orientation  # keep the block's yaw
            yaw = float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))
            env.place_block(named.colour, np.array([xy[0], xy[1], named.position[2]]), yaw)
            return True
    return False


def _render(indices: range, *, seed: int, sim_config, blocks: tuple[int, int], poses: np.ndarray,
            picks: list[int], progress: bool | None, task: str = "box",
            beside: list | None = None) -> list[GroundingFrame]:
    """The layouts at these indices (picks[i]: the borrowed pose's index, -1 for the start pose;
    beside[i]: None, or where to move the named block from the hand, _beside_hand)."""
    from arm_act.common.episodes import episode_spec

    cameras = tuple(c.name for c in sim_config.cameras)
    frames = []
    with ArmEnv(sim_config, task=task) as env, progress_bar(len(indices), "rendering grounding layouts", unit="layout",
                                                 force=progress) as bar:
        for i in indices:
            spec = episode_spec(i, seed, blocks)
            env.reset(spec.seed, spec.n_blocks)
            if picks[i] >= 0:
                env.set_joint_positions(poses[picks[i]])
                if beside is not None and beside[i] is not None:
                    _beside_hand(env, *beside[i])
            rendered = env.render()
            (target,) = [o.position for o in env.objects() if o.kind == "block" and o.colour == env.target_colour]
            target = np.asarray(target, np.float64)
            frames.append(GroundingFrame(
                instruction=env.instruction, images=np.stack([rendered[c] for c in cameras])[None],
                frame_state=np.asarray(env.joint_state().position, np.float32)[None],
                frame_target=target.astype(np.float32)[None],
                target_uv=np.stack([pixel_of(env.camera(c), target) for c in cameras])[None], seed=spec.seed))
            bar.update(1)
    return frames


def _part_path(path: Path, rank: int, size: int) -> Path:
    return path.with_name(f"{path.stem}.part{rank}of{size}.npz")


def _load_parts(path: Path, n: int) -> list[GroundingFrame] | None:
    """The frames from a complete set of part files that an earlier split left (any
    number of processes), None when there is none."""
    sizes = {int(p.name.rsplit("of", 1)[1].removesuffix(".npz"))
             for p in path.parent.glob(f"{path.stem}.part*of*.npz") if p.name.rsplit("of", 1)[1][:-4].isdigit()}
    for size in sorted(sizes):
        if not all(_part_path(path, r, size).is_file() for r in range(size)):
            continue
        parts = [_load(_part_path(path, r, size)) for r in range(size)]
        if all(part is not None and len(part) == len(range(r, n, size)) for r, part in enumerate(parts)):
            return [parts[i % size][i // size] for i in range(n)]
    return None


def _save_or_warn(path: Path, frames: list[GroundingFrame]) -> None:
    try:
        _save(path, frames)
    except OSError as exc:
        logger.warning("cannot write the grounding cache %s: %s", path, exc)


def _save(path: Path, frames: list[GroundingFrame]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, images=np.concatenate([g.images for g in frames]),
                     state=np.concatenate([g.frame_state for g in frames]),
                     target=np.concatenate([g.frame_target for g in frames]),
                     uv=np.concatenate([g.target_uv for g in frames]),
                     seeds=np.array([g.seed for g in frames], np.int64),
                     instructions=np.array(json.dumps([g.instruction for g in frames])))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _load(path: Path) -> list[GroundingFrame] | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            images, state, target, uv = data["images"], data["state"], data["target"], data["uv"]
            seeds, instructions = data["seeds"], json.loads(str(data["instructions"]))
    except Exception as exc:  # noqa: BLE001 - a damaged cache file is rebuilt
        logger.warning("grounding cache %s is unreadable (%s: %s); rendering again", path, type(exc).__name__, exc)
        return None
    return [GroundingFrame(instruction=instructions[i], images=images[i:i + 1], frame_state=state[i:i + 1],
                           frame_target=target[i:i + 1], target_uv=uv[i:i + 1], seed=int(seeds[i]))
            for i in range(len(seeds))]
