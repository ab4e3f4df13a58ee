"""Demonstration bags -> plain arrays for training, through a cache of decoded arrays.

One bag (written by `arm-act collect`, see docs/architecture.md, "Bags") becomes one
EpisodeArrays: the camera frames with the joint state at each frame, and the command the
agent sent at every control tick. Training pairs the frame of tick c with commands
c .. c+K-1 (policy/data.py), the same indexing the runtime uses for a predicted chunk.

Bags stay the source of truth: the decoded arrays of each bag are cached as a directory of
one .npy per array (plus meta.json), keyed by the bag's path and each file's size and mtime,
so a bag that is re-recorded, repaired or touched is decoded again. The cached images are
opened memory-mapped (np.load(mmap_mode="r")): a dataset larger than memory trains, and a
process's resident memory does not grow with the number of episodes (policy/data.py reads
a batch's frames from these files with pread, at the offsets the mappings describe).

Works on rosbags message objects (fields as in rclpy, arrays as numpy), so reading bags
needs no rclpy.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from arm_act.bags import BagError, BagInfo, bag_info, find_bags, read_bag
from arm_act.common.progress import progress_bar
from arm_act.ros.conversions import ARM_COMMAND_TOPIC, ARM_JOINTS, GRIPPER_COMMAND_TOPIC, stamp_to_ns
from arm_act.sim.robot import JOINT_NAMES

logger = logging.getLogger(__name__)

# Bump when extract_episode's output changes meaning, so old cache files are rebuilt.
CACHE_VERSION = 4  # 2: frame_target; 3: the moved block of any task family; 4: from the last goal change
ARM_TOPIC = "/" + ARM_COMMAND_TOPIC
GRIPPER_TOPIC = "/" + GRIPPER_COMMAND_TOPIC
JOINT_TOPIC = "/joint_states"
EPISODE_TOPIC = "/episode"
TASK_TOPIC = "/task"
OBJECTS_TOPIC = "/objects"
# Encodings sensor_msgs/Image may carry that convert losslessly to RGB.


class DatasetError(Exception):
    """A dataset cannot be used; the message is one line naming the bag and the reason."""


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line (YAML and MCAP errors span several)."""
    return " ".join(str(exc).split())


def image_topic(camera: str) -> str:
    return f"/camera/{camera}/image_raw"


@dataclass
class EpisodeArrays:
    """One demonstration as arrays. F camera frames, T control ticks, C cameras.

    frame_ticks (F,) int64: control tick of each frame (0 at the episode's first tick);
    images (F, C, H, W, 3) uint8 RGB in `cameras` order; frame_state (F, 9) float32 joint
    positions at each frame (panda_joint1..7, finger joints 1-2); commands (T, 8) float32:
    the 7 arm joint targets + gripper opening in force at each control tick;
    frame_target (F, 3) float32: the named block's position (m, world frame) at each frame
    from the `objects` topic, NaN where the bag does not say (an auxiliary training target,
    never a policy input).

    Takeover bags (`arm-act collect --policy`, custom_data expert_from_s) keep only the
    frames from the expert's first tick on; `success` is False for one whose expert never
    commanded ("none", status "... (policy only)"), as it demonstrates nothing.
    """

    bag: str
    instruction: str
    success: bool
    status: str
    seed: int
    n_blocks: int
    control_rate: int
    camera_rate: int
    cameras: tuple[str, ...]
    frame_ticks: np.ndarray
    images: np.ndarray
    frame_state: np.ndarray
    commands: np.ndarray
    frame_target: np.ndarray

    @property
    def n_frames(self) -> int:
        return int(self.frame_ticks.shape[0])

    @property
    def n_ticks(self) -> int:
        return int(self.commands.shape[0])


# ---------------------------------------------------------------- one bag
def _target_position(msg, colour: str) -> np.ndarray | None:
    """The position of the block of this colour, from an `objects` MarkerArray (ns = kind,
    text = "name|colour"); None when no single block matches."""
    found = [m for m in msg.markers if m.ns == "block" and str(m.text).partition("|")[2] == colour]
    if len(found) != 1:
        return None
    p = found[0].pose.position
    position = np.array([p.x, p.y, p.z], dtype=np.float64)
    return position if np.all(np.isfinite(position)) else None


def image_to_rgb(msg, bag: Path | str, topic: str) -> np.ndarray:
    """A sensor_msgs/Image read from a bag -> (H, W, 3) uint8 RGB (a copy), with the live
    system's conversion (rgb8, bgr8, rgba8, bgra8, mono8); anything else is a DatasetError."""
    from arm_act.ros.conversions import ConversionError, image_from_msg

    try:
        return np.array(image_from_msg(msg))
    except ConversionError as exc:
        raise DatasetError(f"{bag}: {topic}: {exc}") from None


def _joint_positions(msg, bag: Path) -> np.ndarray:
    names = list(msg.name)
    position = np.asarray(msg.position, dtype=np.float64)
    if names:
        index = {name: i for i, name in enumerate(names)}
        missing = [n for n in JOINT_NAMES if n not in index]
        if missing or len(position) != len(names):
            raise DatasetError(f"{bag}: {JOINT_TOPIC} lacks joints {missing} or has "
                               f"{len(position)} positions for {len(names)} names")
        position = position[[index[n] for n in JOINT_NAMES]]
    elif position.shape != (len(JOINT_NAMES),):
        raise DatasetError(f"{bag}: {JOINT_TOPIC} has {position.size} unnamed positions, "
                           f"expected {len(JOINT_NAMES)}")
    if not np.all(np.isfinite(position)):
        raise DatasetError(f"{bag}: {JOINT_TOPIC} holds non-finite positions")
    return position


def _episode_json(msg, bag: Path) -> dict:
    """The `episode` topic's JSON (arm_act.ros.conversions.EpisodeInfo, parsed here without
    rclpy), with EpisodeInfo's defaults for the fields older bags lack."""
    try:
        data = json.loads(msg.data)
        return {"state": str(data["state"]), "start": float(data.get("start", 0.0)),
                "control_rate": int(data.get("control_rate", 50)),
                "camera_rate": int(data.get("camera_rate", 10)),
                "seed": int(data.get("seed", -1)), "n_blocks": int(data.get("n_blocks", -1)),
                "instruction": str(data.get("instruction", "")),
                "last_change": _last_goal_change(data.get("goal_changes"))}
    except (ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"{bag}: {EPISODE_TOPIC} is not the documented JSON ({exc})") from None


def _last_goal_change(changes) -> float | None:
    """The sim time (s) of the last of EpisodeInfo.goal_changes, None without any; ValueError
    for a list that is not [{"time": finite s >= 0, "instruction": text}, ...]."""
    if not changes:
        return None
    if not isinstance(changes, list):
        raise ValueError(f"goal_changes {changes!r:.60} is not a list")
    times = [float(change["time"]) for change in changes]
    if not all(math.isfinite(t) and t >= 0 for t in times):
        raise ValueError(f"goal_changes times {times} must be finite and >= 0")
    return max(times)


def _command_series(stamps: list[int], values: list[np.ndarray], ticks_ns: np.ndarray,
                    half_period_ns: int, bag: Path, topic: str) -> np.ndarray:
    """For each tick time t_k: the last command with bag timestamp <= t_k + half a period.
    -> (T, n) array."""
    order = np.argsort(np.asarray(stamps, dtype=np.int64), kind="stable")
    stamps_sorted = np.asarray(stamps, dtype=np.int64)[order]
    chosen = np.searchsorted(stamps_sorted, ticks_ns + half_period_ns, side="right") - 1
    if chosen[0] < 0:
        raise DatasetError(f"{bag}: control tick 0 (t={ticks_ns[0] * 1e-9:.3f} s) comes before "
                           f"the first {topic} command (t={stamps_sorted[0] * 1e-9:.3f} s)")
    return np.stack(values)[order][chosen]


def _required_topics(bag: Path, info, cameras: tuple[str, ...]) -> list[str]:
    """The topics extraction reads that the bag must hold, commands non-empty."""
    required = [EPISODE_TOPIC, JOINT_TOPIC, ARM_TOPIC, GRIPPER_TOPIC]
    required += [image_topic(c) for c in cameras]
    for topic in required:
        if topic not in info.topics:
            raise DatasetError(f"{bag}: no {topic} topic (topics: "
                               f"{', '.join(sorted(info.topics))})")
    for topic in (ARM_TOPIC, GRIPPER_TOPIC):
        if info.topics[topic].message_count == 0:
            raise DatasetError(f"{bag}: no commands on {topic}; a bag without the agent's "
                               "commands cannot train a policy")
    return required


@dataclass
class _BagContents:
    """What extraction reads from one bag, in bag order (stamps in ns)."""

    episodes: list[dict] = field(default_factory=list)  # the `episode` JSON messages
    task: str | None = None
    joint_stamps: list[int] = field(default_factory=list)  # header stamps
    joint_values: list[np.ndarray] = field(default_factory=list)  # (9,) each
    commands: dict[str, tuple[list[int], list[np.ndarray]]] = field(
        default_factory=lambda: {ARM_TOPIC: ([], []), GRIPPER_TOPIC: ([], [])})  # bag stamps, values
    frames: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)  # camera -> header stamp -> (H, W, 3)
    objects: list[tuple[int, object]] = field(default_factory=list)  # (bag stamp, MarkerArray)


_COMMAND_WIDTH = {ARM_TOPIC: ARM_JOINTS, GRIPPER_TOPIC: 1}


def _read_contents(bag: Path, required: list[str], cameras: tuple[str, ...]) -> _BagContents:
    """Decode the messages extraction needs; DatasetError for malformed ones or a damaged file."""
    contents = _BagContents(frames={c: {} for c in cameras})
    topic_camera = {image_topic(c): c for c in cameras}
    try:
        for topic, stamp, msg in read_bag(bag, required + [TASK_TOPIC, OBJECTS_TOPIC]):
            if topic == EPISODE_TOPIC:
                contents.episodes.append(_episode_json(msg, bag))
            elif topic == TASK_TOPIC:
                contents.task = str(msg.data)
            elif topic == OBJECTS_TOPIC:
                # MarkerArray has no header: the bag stamp; decoded once the instruction is known
                contents.objects.append((int(stamp), msg))
            elif topic == JOINT_TOPIC:
                contents.joint_stamps.append(stamp_to_ns(msg.header.stamp))
                contents.joint_values.append(_joint_positions(msg, bag))
            elif topic in contents.commands:
                values = np.asarray(msg.data, dtype=np.float64)
                if values.shape != (_COMMAND_WIDTH[topic],) or not np.all(np.isfinite(values)):
                    raise DatasetError(f"{bag}: {topic} message at t={stamp * 1e-9:.3f} s has "
                                       f"{values.size} values {values.tolist()}, expected "
                                       f"{_COMMAND_WIDTH[topic]} finite values")
                contents.commands[topic][0].append(int(stamp))
                contents.commands[topic][1].append(values)
            else:
                contents.frames[topic_camera[topic]][stamp_to_ns(msg.header.stamp)] = image_to_rgb(msg, bag, topic)
    except DatasetError:
        raise
    except BagError as exc:
        raise DatasetError(_one_line(exc)) from None
    except Exception as exc:  # noqa: BLE001 - rosbags/zstd/struct errors of a damaged file
        raise DatasetError(f"{bag}: cannot read bag ({type(exc).__name__}: "
                           f"{_one_line(exc)})") from None
    if not contents.episodes:
        raise DatasetError(f"{bag}: no messages on {EPISODE_TOPIC} (episode start and rates)")
    return contents


@dataclass(frozen=True)
class _TickClock:
    """Control ticks of an episode: tick k at start_ns + k / rate."""

    start_ns: int
    rate: int

    def tick_of(self, stamps: np.ndarray) -> np.ndarray:
        return np.rint((stamps - self.start_ns) * self.rate / 1e9).astype(np.int64)

    def stamps_of(self, n_ticks: int) -> np.ndarray:
        return self.start_ns + np.rint(np.arange(n_ticks) * 1e9 / self.rate).astype(np.int64)


def _tick_clock(first: dict, bag: Path) -> _TickClock:
    """The episode's clock from its first `episode` message."""
    rate = first["control_rate"]
    if rate < 1 or first["camera_rate"] < 1:
        raise DatasetError(f"{bag}: {EPISODE_TOPIC} has control_rate={rate}, "
                           f"camera_rate={first['camera_rate']}; both must be >= 1")
    return _TickClock(int(round(first["start"] * 1e9)), rate)


def _command_array(contents: _BagContents, clock: _TickClock, bag: Path) -> np.ndarray:
    """(T, 8) float32: the arm + gripper command in force at each control tick 0 .. T-1,
    up to the tick of the last command."""
    commands = contents.commands
    last_stamp = max(max(commands[ARM_TOPIC][0]), max(commands[GRIPPER_TOPIC][0]))
    n_ticks = int(clock.tick_of(np.array([last_stamp]))[0]) + 1
    if n_ticks < 1:
        raise DatasetError(f"{bag}: every command is stamped before the episode start")
    ticks_ns = clock.stamps_of(n_ticks)
    half_period = int(round(0.5e9 / clock.rate))
    arm = _command_series(*commands[ARM_TOPIC], ticks_ns, half_period, bag, ARM_TOPIC)
    gripper = _command_series(*commands[GRIPPER_TOPIC], ticks_ns, half_period, bag, GRIPPER_TOPIC)
    return np.concatenate([arm, gripper], axis=1).astype(np.float32)  # (T, 8)


def _camera_frames(contents: _BagContents, cameras: tuple[str, ...], clock: _TickClock, n_ticks: int,
                   bag: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Frames: the stamps where every camera has an image, within the commanded ticks ->
    stamps (F,) int64, frame ticks (F,) int64, images (F, C, H, W, 3) uint8."""
    frames = contents.frames
    stamps = sorted(set.intersection(*(set(f) for f in frames.values())))
    dropped = sum(len(f) for f in frames.values()) - len(stamps) * len(cameras)
    if dropped:
        logger.warning("%s: %d camera images without a matching image from every camera "
                       "are ignored", bag, dropped)
    stamp_array = np.asarray(stamps, dtype=np.int64)
    frame_ticks = clock.tick_of(stamp_array) if stamps else np.zeros(0, np.int64)
    keep = (frame_ticks >= 0) & (frame_ticks < n_ticks)
    stamp_array, frame_ticks = stamp_array[keep], frame_ticks[keep]
    if len(frame_ticks) == 0:
        raise DatasetError(f"{bag}: no camera frame from all of {list(cameras)} falls within "
                           f"the {n_ticks} commanded control ticks")
    shapes = {frames[c][int(s)].shape for c in cameras for s in stamp_array}
    if len(shapes) != 1:
        raise DatasetError(f"{bag}: camera images differ in size: "
                           f"{sorted(f'{w}x{h}' for h, w, _ in shapes)}")
    images = np.stack([np.stack([frames[c][int(s)] for c in cameras]) for s in stamp_array])
    return stamp_array, frame_ticks, images


def _frame_state(contents: _BagContents, frame_stamps: np.ndarray, bag: Path) -> np.ndarray:
    """(F, 9) float32: the joint state stamped with each frame's stamp, else the latest before."""
    order = np.argsort(np.asarray(contents.joint_stamps, dtype=np.int64), kind="stable")
    stamps = np.asarray(contents.joint_stamps, dtype=np.int64)[order]
    if len(stamps) == 0:
        raise DatasetError(f"{bag}: no messages on {JOINT_TOPIC}")
    chosen = np.searchsorted(stamps, frame_stamps, side="right") - 1
    if chosen[0] < 0:
        raise DatasetError(f"{bag}: the first camera frame (t={frame_stamps[0] * 1e-9:.3f} s) "
                           f"comes before the first {JOINT_TOPIC} message")
    return np.stack(contents.joint_values)[order][chosen].astype(np.float32)  # (F, 9)


@dataclass(frozen=True)
class _Outcome:
    instruction: str
    success: bool
    status: str
    seed: int
    n_blocks: int


def _outcome(custom: dict, contents: _BagContents, bag: Path) -> _Outcome:
    """Instruction, success, status, seed and block count: custom_data first, then the
    `episode` messages (the first for the instruction, the last for the state), then `task`."""
    first, last = contents.episodes[0], contents.episodes[-1]
    instruction = custom.get("instruction") or first["instruction"] or contents.task or ""
    if not instruction:
        raise DatasetError(f"{bag}: no instruction (custom_data, {EPISODE_TOPIC} and "
                           f"{TASK_TOPIC} lack one)")
    status = custom.get("status", last["state"])
    if custom.get("success") in ("true", "false"):
        success = custom["success"] == "true"
    else:
        success = last["state"] == "success"

    def as_int(key: str, fallback: int) -> int:
        try:
            return int(custom[key])
        except (KeyError, ValueError):
            return fallback

    return _Outcome(instruction, success, status, as_int("seed", first["seed"]), as_int("n_blocks", first["n_blocks"]))


def extract_episode(bag_dir: str | os.PathLike,
                    cameras: Sequence[str] = ("front", "wrist")) -> EpisodeArrays:
    """Decode one demonstration bag into arrays. Raises DatasetError naming the bag and the
    topic or field that is missing or malformed."""
    return _extract(Path(bag_dir), tuple(cameras))[0]


def extract_episode_with_tick_state(bag_dir: str | os.PathLike, cameras: Sequence[str] = ("front", "wrist")
                                    ) -> tuple[EpisodeArrays, np.ndarray]:
    """extract_episode, plus the joint state at every control tick, (T, 9) float32: the
    latest joint state stamped at or before the tick's time, NaN rows before the first one.
    For formats with a row per control tick (arm_act/data/lerobot), where EpisodeArrays
    keeps the state only at the camera frames."""
    episode, contents, clock = _extract(Path(bag_dir), tuple(cameras))
    order = np.argsort(np.asarray(contents.joint_stamps, dtype=np.int64), kind="stable")
    stamps = np.asarray(contents.joint_stamps, dtype=np.int64)[order]
    chosen = np.searchsorted(stamps, clock.stamps_of(episode.n_ticks), side="right") - 1
    state = np.stack(contents.joint_values)[order][np.maximum(chosen, 0)].astype(np.float32)
    state[chosen < 0] = np.nan
    return episode, state


def _extract(bag: Path, cameras: tuple[str, ...],
             info: BagInfo | None = None) -> tuple[EpisodeArrays, _BagContents, _TickClock]:
    """extract_episode, with what it read from the bag and the episode's tick clock. info: the
    bag's bag_info when the caller has read it already (each reading opens the bag and
    compiles its message types)."""
    if not cameras:
        raise DatasetError("no cameras given")
    if info is None:
        try:
            info = bag_info(bag)
        except BagError as exc:
            raise DatasetError(_one_line(exc)) from None
    contents = _read_contents(bag, _required_topics(bag, info, cameras), cameras)
    first = contents.episodes[0]
    clock = _tick_clock(first, bag)
    commands = _command_array(contents, clock, bag)
    stamps, frame_ticks, images = _camera_frames(contents, cameras, clock, len(commands), bag)
    frame_state = _frame_state(contents, stamps, bag)
    outcome = _outcome(info.custom_data, contents, bag)
    frame_target = _frame_targets(contents.objects, stamps, _moved_colour(info.custom_data, outcome.instruction))
    success, status = outcome.success, outcome.status
    start = _demonstrated_from(info.custom_data, contents.episodes[-1]["last_change"], bag)
    if start is not None:
        images, frame_state, frame_target, frame_ticks, success, status = _frames_from(
            start, clock.rate, images, frame_state, frame_target, frame_ticks, success, status)
    episode = EpisodeArrays(
        bag=str(bag), instruction=outcome.instruction, success=success, status=status,
        seed=outcome.seed, n_blocks=outcome.n_blocks, control_rate=clock.rate, camera_rate=first["camera_rate"],
        cameras=cameras, frame_ticks=frame_ticks, images=images, frame_state=frame_state,
        commands=commands, frame_target=frame_target)
    return episode, contents, clock


def _demonstrated_from(custom: dict, last_change: float | None, bag: Path) -> float | str | None:
    """Where the bag's demonstration starts (sim s), None for all of it:
    - a takeover bag: from the tick the expert took over (custom_data expert_from_s; "none"
      when the policy ended the episode before the handover: it demonstrates nothing);
    - a bag whose goal changed: from the last change, since the frames before it show the
      arm working for a goal the episode's instruction no longer names.
    The later of the two when both apply."""
    expert_from = custom.get("expert_from_s")
    if expert_from == "none":
        return "none"
    starts = [] if last_change is None else [last_change]
    if expert_from is not None:
        try:
            seconds = float(expert_from)
        except ValueError:
            raise DatasetError(f"{bag}: custom_data expert_from_s={expert_from!r} is not a number or "
                               "'none'") from None
        if not math.isfinite(seconds) or seconds < 0:
            raise DatasetError(f"{bag}: custom_data expert_from_s={expert_from!r} must be >= 0")
        starts.append(seconds)
    return max(starts) if starts else None


def _frames_from(start: float | str, rate: int, images, frame_state, frame_target, frame_ticks,
                 success: bool, status: str):
    """The frames from sim time `start` (_demonstrated_from) on; none left: the bag
    demonstrates nothing and counts as not successful."""
    if start == "none":
        return images[:0], frame_state[:0], frame_target[:0], frame_ticks[:0], False, f"{status} (policy only)"
    keep = frame_ticks >= int(round(start * rate))
    if not keep.any():
        return images[:0], frame_state[:0], frame_target[:0], frame_ticks[:0], False, f"{status} (no expert frames)"
    return images[keep], frame_state[keep], frame_target[keep], frame_ticks[keep], success, status


def _moved_colour(custom: dict, instruction: str) -> str | None:
    """The colour of the block the episode moves (the target head's label): the goal in
    custom_data (bags of task families), else the instruction's goal; None when neither
    names one (the frames then have no target)."""
    from arm_act.sim.instructions import Goal, parse_goal

    if "goal" in custom:
        try:
            return Goal.from_dict(json.loads(custom["goal"])).colour
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("custom_data goal %r is not a goal (%s); reading the instruction", custom["goal"], exc)
    goal = parse_goal(instruction)
    return goal.colour if goal else None


def _frame_targets(objects: list[tuple[int, object]], frame_stamps: np.ndarray,
                   colour: str | None) -> np.ndarray:
    """(F, 3) float32: the position of the block of `colour` in the latest `objects` message
    at or before each frame stamp; NaN rows where there is none or no single such block."""
    out = np.full((len(frame_stamps), 3), np.nan, dtype=np.float32)
    if not objects or colour is None:
        return out
    objects = sorted(objects, key=lambda item: item[0])
    stamps = np.array([s for s, _ in objects], dtype=np.int64)
    chosen = np.searchsorted(stamps, frame_stamps, side="right") - 1
    for i, j in enumerate(chosen):
        if j >= 0:
            position = _target_position(objects[j][1], colour)
            if position is not None:
                out[i] = position
    return out


# ---------------------------------------------------------------- the cache
def _fingerprint(bag: Path, cameras: Sequence[str]) -> str:
    """What the cached arrays depend on: the bag's path, every file's size and mtime, the
    cameras and the extractor version."""
    files = []
    for path in sorted(bag.iterdir()):
        if path.is_file():
            stat = path.stat()
            files.append([path.name, stat.st_size, stat.st_mtime_ns])
    return json.dumps({"version": CACHE_VERSION, "bag": str(bag.resolve()),
                       "cameras": list(cameras), "files": files}, sort_keys=True)


CACHE_SUFFIX = ".episode"  # one directory per bag: meta.json + <array>.npy
_ARRAY_FIELDS = ("frame_ticks", "images", "frame_state", "commands", "frame_target")
# Opened memory-mapped; the others are small (a few KB per episode) and are read whole.
_MAPPED_FIELDS = ("images",)
_META_FILE = "meta.json"


def cache_path(cache_dir: Path, bag: Path, cameras: Sequence[str]) -> Path:
    key = hashlib.sha256(f"{bag.resolve()}|{','.join(cameras)}".encode()).hexdigest()[:16]
    return Path(cache_dir) / f"{bag.name}-{key}{CACHE_SUFFIX}"


def _save_cache(path: Path, episode: EpisodeArrays, fingerprint: str) -> None:
    """Write the cache directory next to its final place and rename it in (the previous
    one, if any, is moved aside first), so a reader sees a whole entry or none. A process
    that still maps the old files keeps reading them (unlinked files stay valid)."""
    meta = {f.name: getattr(episode, f.name) for f in fields(EpisodeArrays)
            if f.name not in _ARRAY_FIELDS}
    meta["cameras"] = list(episode.cameras)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    old = path.with_name(f".{path.name}.{os.getpid()}.old")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        for name in _ARRAY_FIELDS:
            # Plain .npy (uncompressed, C order): what np.load can map without a copy.
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(getattr(episode, name)),
                    allow_pickle=False)
        (tmp / _META_FILE).write_text(json.dumps({"fingerprint": fingerprint, "meta": meta}))
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def _load_cache(path: Path, fingerprint: str) -> EpisodeArrays | None:
    """The cached episode (images memory-mapped, read-only), or None when absent, stale or
    unreadable."""
    if not (path / _META_FILE).is_file():
        return None
    try:
        body = json.loads((path / _META_FILE).read_text())
        if body.get("fingerprint") != fingerprint:
            return None
        meta = body["meta"]
        arrays = {name: np.load(path / f"{name}.npy", allow_pickle=False,
                                mmap_mode="r" if name in _MAPPED_FIELDS else None)
                  for name in _ARRAY_FIELDS}
        n = len(arrays["frame_ticks"])
        if any(len(arrays[name]) != n for name in ("images", "frame_state", "frame_target")):
            raise ValueError("arrays of different lengths")
        meta["cameras"] = tuple(meta["cameras"])
        return EpisodeArrays(**meta, **arrays)
    except Exception as exc:  # noqa: BLE001 - any damage to a cache entry means: rebuild it
        logger.warning("cache entry %s is unreadable (%s: %s); rebuilding it", path,
                       type(exc).__name__, exc)
        return None


def _allow_open_files(needed: int) -> None:
    """Each memory-mapped array keeps a file descriptor open (Python's mmap holds a
    duplicate): raise the soft limit towards the hard one when the dataset needs more."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed + 256  # headroom for the rest of the process
    if soft == resource.RLIM_INFINITY or want <= soft:
        return
    if hard != resource.RLIM_INFINITY and want > hard:
        raise DatasetError(f"{needed} cached episodes need {want} open files, the limit is "
                           f"{hard} (ulimit -Hn); raise it")
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def _read_through_cache(bag: Path, cache_dir: Path, cameras: tuple[str, ...]) -> tuple[EpisodeArrays | None, bool]:
    """(the bag's episode, whether it came from the cache); None for an incomplete bag
    (skipped with a warning). A bag the cache lacks is decoded and written there."""
    fingerprint = _fingerprint(bag, cameras)
    target = cache_path(cache_dir, bag, cameras)
    episode = _load_cache(target, fingerprint)
    if episode is not None:
        return episode, True
    try:
        info = bag_info(bag)
    except BagError as exc:
        raise DatasetError(_one_line(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a damaged file, one line
        raise DatasetError(f"{bag}: cannot read bag ({type(exc).__name__}: {_one_line(exc)})") from None
    if not info.complete:
        logger.warning("skipping incomplete bag %s: %s", bag, info.problem)
        return None, False
    episode = _extract(bag, cameras, info)[0]
    try:
        _save_cache(target, episode, fingerprint)
    except OSError as exc:
        logger.warning("cannot write cache entry %s: %s", target, exc)
        return episode, False
    # train from the mapped copy, so decoded images do not pile up in memory
    return _load_cache(target, fingerprint) or episode, False


def _in_cache(bag: Path, cache_dir: Path, cameras: tuple[str, ...]) -> bool:
    """The cache holds the bag's current entry (its meta.json names the bag's fingerprint)."""
    meta = cache_path(cache_dir, bag, cameras) / _META_FILE
    try:
        return json.loads(meta.read_text()).get("fingerprint") == _fingerprint(bag, cameras)
    except (OSError, ValueError, AttributeError):
        return False


def _complete(bag: Path) -> bool:
    try:
        return bag_info(bag).complete
    except Exception:  # noqa: BLE001 - a damaged bag: load_dataset reports it
        return True


def decode_share(bags: Sequence[Path], cache_dir: str | os.PathLike, cameras: Sequence[str] = ("front", "wrist"),
                 *, share: tuple[int, int] | None = None, stall_s: float | None = None) -> int:
    """Before data-parallel processes on one machine each load_dataset the same bags:
    decode this process's share of the bags the cache lacks (every size-th bag of `bags`
    from `rank`; share: (rank, size), default torchrun's local rank and process count),
    then wait until the other processes' shares are in the cache (arm_act.common.shares),
    so each bag is decoded once instead of once per process. -> how many bags this process
    decoded. Incomplete bags are skipped by all; a damaged one raises DatasetError."""
    from arm_act.common.shares import STALL_S, local_share, wait_for_others

    rank, size = share or local_share()
    cameras, cache = tuple(cameras), Path(cache_dir)
    bags = [Path(b) for b in bags]
    if size <= 1:
        return 0
    mine = [bag for bag in bags[rank::size] if not _in_cache(bag, cache, cameras)]
    decoded = 0
    if mine:
        logger.info("process %d of %d: %d of its share of the bags (every %d-th) are not in the cache; "
                    "decoding them", rank, size, len(mine), size)
        _allow_open_files(len(bags))
        with progress_bar(len(mine), "decoding bags", unit="bag") as bar:
            for bag in mine:
                decoded += _read_through_cache(bag, cache, cameras)[0] is not None
                bar.update(1)
    theirs = [bag for i, bag in enumerate(bags) if i % size != rank and not _in_cache(bag, cache, cameras)]
    theirs = [bag for bag in theirs if _complete(bag)]  # an incomplete bag never gets an entry
    wait_for_others(theirs, lambda bag: _in_cache(bag, cache, cameras), "decoded bags",
                    stall_s=STALL_S if stall_s is None else stall_s)
    return decoded


def load_dataset(dirs: Sequence[str | os.PathLike], cache_dir: str | os.PathLike,
                 cameras: Sequence[str] = ("front", "wrist"), *,
                 progress: bool | None = None) -> list[EpisodeArrays]:
    """Every complete bag that `dirs` name (arm_act.bags.find_bags: bags at or under each
    path) as EpisodeArrays (failed demonstrations included: see EpisodeArrays.success),
    decoded through the cache in `cache_dir`.

    Incomplete bags are skipped with a warning; a corrupt one, or a path naming no bag,
    raises DatasetError. progress: a bar over bags (None: when stderr is a terminal).
    """
    cameras = tuple(cameras)
    try:
        bags = find_bags(dirs)
    except BagError as exc:
        raise DatasetError(_one_line(exc)) from None
    episodes: list[EpisodeArrays] = []
    cached = 0
    _allow_open_files(len(bags))
    with progress_bar(len(bags), "reading bags", unit="bag", force=progress) as bar:
        for bag in bags:
            episode, from_cache = _read_through_cache(bag, Path(cache_dir), cameras)
            cached += from_cache
            if episode is not None:
                episodes.append(episode)
            bar.update(1)
    logger.info("%d bags read (%d from the cache in %s), %d skipped as incomplete",
                len(episodes), cached, cache_dir, len(bags) - len(episodes))
    if not episodes:
        raise DatasetError(f"no complete bags among the {len(bags)} found under "
                           f"{', '.join(str(d) for d in dirs)}")
    return episodes
