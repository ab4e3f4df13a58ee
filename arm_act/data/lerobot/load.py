"""LeRobotDataset v3.0 directories -> EpisodeArrays for training (`arm-act train --data DIR`),
ours (arm_act/data/lerobot/export.py) or one recorded elsewhere with matching features.

The features must fit the policy: observation.state of 9 values (panda_joint1..7, the two
finger joints), action of 8 (7 joint targets, the gripper opening), one video feature
observation.images.<camera> per camera of the policy, and fps equal to the control rate
(a chunk step is one control tick). A feature that does not fit is one DatasetError naming it.

Rows become EpisodeArrays as load_dataset builds them from bags: commands = every row's
action; the frames are the rows where `camera_frame` is true (every row when the dataset
has no such column), each with its row's state and images; frame_ticks are those rows'
numbers within the episode. Episode metadata (success, status, seed, ...) comes from
arm-act's own columns of meta/episodes when present; an episode without them counts as a
successful demonstration. Decoded episodes go through the same cache as bags (images
memory-mapped), keyed by the dataset's files' sizes and mtimes, so a dataset is decoded once.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from arm_act.common.progress import progress_bar
from arm_act.data.dataset import (
    CACHE_VERSION,
    DatasetError,
    EpisodeArrays,
    _load_cache,
    _save_cache,
    cache_path,
    load_dataset,
)
from arm_act.data.lerobot import layout

logger = logging.getLogger(__name__)


def is_lerobot_dataset(path: str | os.PathLike) -> bool:
    """A directory with meta/info.json: a LeRobot dataset rather than bags."""
    return (Path(path) / layout.INFO_PATH).is_file()


def read_info(root: Path) -> dict:
    try:
        info = json.loads((root / layout.INFO_PATH).read_text())
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{root}: {layout.INFO_PATH} is not readable JSON ({exc})") from None
    missing = [key for key in ("codebase_version", "fps", "features", "data_path") if key not in info]
    if missing:
        raise DatasetError(f"{root}: {layout.INFO_PATH} lacks {', '.join(missing)}")
    if not str(info["codebase_version"]).startswith("v3."):
        raise DatasetError(f"{root}: codebase_version {info['codebase_version']!r}; only LeRobotDataset v3.x "
                           "is read (LeRobot converts older versions)")
    return info


def _feature_shape(feature: dict) -> list[int]:
    return [int(n) for n in feature.get("shape", [])]


def check_features(root: Path, info: dict, cameras: Sequence[str], fps: int) -> None:
    """DatasetError naming the first feature (or the fps) that does not fit (module docstring)."""
    features = info["features"]
    if info["fps"] != fps:
        raise DatasetError(f"{root}: fps is {info['fps']}, the control rate is {fps} Hz; a chunk step is one "
                           "control tick, so the dataset's rows must be at the control rate")
    for key, width, what in ((layout.STATE, 9, "panda_joint1..7 and the two finger joints"),
                             (layout.ACTION, 8, "7 joint targets and the gripper opening")):
        if key not in features:
            raise DatasetError(f"{root}: no feature {key!r} (features: {', '.join(features)})")
        if _feature_shape(features[key]) != [width] or features[key].get("dtype") not in ("float32", "float64"):
            raise DatasetError(f"{root}: feature {key!r} is {features[key].get('dtype')} of shape "
                               f"{_feature_shape(features[key])}; expected float32 of shape [{width}] ({what})")
    for camera in cameras:
        key = layout.image_key(camera)
        if key not in features:
            have = [k for k, f in features.items() if f.get("dtype") in ("video", "image")]
            raise DatasetError(f"{root}: no feature {key!r} for the policy's camera {camera!r} (cameras in the "
                               f"dataset: {', '.join(have) or 'none'})")
        feature = features[key]
        if feature.get("dtype") != "video":
            raise DatasetError(f"{root}: feature {key!r} has dtype {feature.get('dtype')!r}; only video "
                               "features are read")
        shape, names = _feature_shape(feature), feature.get("names") or ["height", "width", "channels"]
        if len(shape) != 3 or names[2] not in ("channel", "channels") or shape[2] != 3:
            raise DatasetError(f"{root}: feature {key!r} has shape {shape} ({names}); expected "
                               "[height, width, 3]")
        video_fps = (feature.get("info") or {}).get("video.fps", fps)
        if video_fps != fps:
            raise DatasetError(f"{root}: feature {key!r} is a video at {video_fps} fps, the dataset's rows are "
                               f"at {fps}")
    if not info.get("video_path"):
        raise DatasetError(f"{root}: {layout.INFO_PATH} has no video_path")


def _read_tables(root: Path, pattern: str, what: str, columns=None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = sorted(root.glob(pattern))
    if not paths:
        raise DatasetError(f"{root}: no {what} files ({pattern})")
    try:
        tables = [pq.read_table(p, columns=columns) for p in paths]
        return pa.concat_tables(tables, promote_options="default")
    except Exception as exc:  # noqa: BLE001 - a damaged or foreign file: one line naming it
        raise DatasetError(f"{root}: cannot read the {what} ({type(exc).__name__}: "
                           f"{' '.join(str(exc).split())})") from None


def _fingerprint(root: Path, cameras: Sequence[str]) -> str:
    """What the cached episodes of a dataset depend on: every file's size and mtime."""
    files = sorted([str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns]
                   for p in root.rglob("*") if p.is_file())
    return json.dumps({"version": CACHE_VERSION, "lerobot": str(root.resolve()), "cameras": list(cameras),
                       "files": files}, sort_keys=True)


def _tasks(root: Path) -> dict[int, str]:
    table = _read_tables(root, layout.TASKS_PATH, "tasks")
    if "task" not in table.column_names or "task_index" not in table.column_names:
        raise DatasetError(f"{root}: {layout.TASKS_PATH} has columns {table.column_names}, expected task "
                           "and task_index")
    return dict(zip(table.column("task_index").to_pylist(), table.column("task").to_pylist(), strict=True))


def _decode_episode(root: Path, info: dict, meta: dict, rows, tasks: dict[int, str],
                    cameras: tuple[str, ...]) -> EpisodeArrays:
    """One episode's EpisodeArrays from its data rows (a pyarrow table, in order) and videos."""
    index, fps, n = int(meta["episode_index"]), int(info["fps"]), rows.num_rows
    name = f"{root} episode {index}"
    try:
        state = layout.column_array(rows.column(layout.STATE), 9).astype(np.float32)
        action = layout.column_array(rows.column(layout.ACTION), 8).astype(np.float32)
        fresh = (layout.column_array(rows.column(layout.CAMERA_FRAME)).astype(bool)
                 if layout.CAMERA_FRAME in rows.column_names else np.ones(n, bool))
        target = (layout.column_array(rows.column(layout.TARGET), 3).astype(np.float32)
                  if layout.TARGET in rows.column_names else np.full((n, 3), np.nan, np.float32))
    except ValueError as exc:
        raise DatasetError(f"{name}: {exc}") from None
    frame_rows = np.flatnonzero(fresh)
    if len(frame_rows) == 0:
        raise DatasetError(f"{name}: no row has a camera frame")
    images = []
    for camera in cameras:
        key = layout.image_key(camera)
        path = root / info["video_path"].format(video_key=key, chunk_index=int(meta[f"videos/{key}/chunk_index"]),
                                                file_index=int(meta[f"videos/{key}/file_index"]))
        height, width = _feature_shape(info["features"][key])[:2]
        try:
            images.append(layout.read_video_frames(path, float(meta[f"videos/{key}/from_timestamp"]), fps,
                                                   frame_rows, (height, width)))
        except ValueError as exc:
            raise DatasetError(f"{name}: {path.relative_to(root)}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a missing or damaged video, one line
            raise DatasetError(f"{name}: cannot read {path.relative_to(root)} ({type(exc).__name__}: "
                               f"{' '.join(str(exc).split())})") from None
    task_index = int(rows.column("task_index")[0].as_py()) if "task_index" in rows.column_names else None
    instruction = tasks.get(task_index) or (list(meta.get("tasks") or [""]) or [""])[0]
    if not instruction:
        raise DatasetError(f"{name}: no task (instruction)")
    extra = {key.partition("/")[2]: meta.get(key) for key in layout.EPISODE_EXTRAS}
    success = True if extra["success"] is None else bool(extra["success"])
    return EpisodeArrays(
        bag=f"{root}#episode_{index:06d}", instruction=str(instruction), success=success,
        status=str(extra["status"] if extra["status"] is not None else ("success" if success else "failure")),
        seed=int(extra["seed"] if extra["seed"] is not None else -1),
        n_blocks=int(extra["n_blocks"] if extra["n_blocks"] is not None else -1),
        control_rate=fps, camera_rate=int(extra["camera_rate"] or fps), cameras=cameras,
        frame_ticks=frame_rows.astype(np.int64), images=np.stack(images, axis=1), frame_state=state[frame_rows],
        commands=action, frame_target=target[frame_rows])


def load_lerobot(root: str | os.PathLike, cache_dir: str | os.PathLike, cameras: Sequence[str] = ("front", "wrist"),
                 *, fps: int | None = None, progress: bool | None = None) -> list[EpisodeArrays]:
    """Every episode of the LeRobot dataset `root` as EpisodeArrays (module docstring),
    decoded through the cache in `cache_dir`. fps: the control rate the rows must have
    (default: the simulator's). Raises DatasetError naming what does not fit or cannot be read."""
    import pyarrow.compute as pc

    from arm_act.sim.config import SimConfig

    root, cameras = Path(root), tuple(cameras)
    info = read_info(root)
    check_features(root, info, cameras, SimConfig().control_rate_hz if fps is None else fps)
    episodes_meta = _read_tables(root, "meta/episodes/*/*.parquet", "episode metadata").to_pylist()
    fingerprint = _fingerprint(root, cameras)
    cached = [(meta, cache_path(Path(cache_dir), root / f"episode_{int(meta['episode_index']):06d}", cameras))
              for meta in episodes_meta]
    out = [_load_cache(path, fingerprint) for _, path in cached]
    from_cache = sum(episode is not None for episode in out)
    if any(episode is None for episode in out):
        columns = [c for c in (layout.STATE, layout.ACTION, layout.CAMERA_FRAME, layout.TARGET, "index",
                               "episode_index", "task_index") if c in info["features"]]
        data = _read_tables(root, "data/*/*.parquet", "data", columns)
        tasks = _tasks(root)
        with progress_bar(len(cached), f"decoding {root.name}", unit="episode", force=progress) as bar:
            for i, (meta, path) in enumerate(cached):
                if out[i] is None:
                    start, stop = int(meta["dataset_from_index"]), int(meta["dataset_to_index"])
                    mask = pc.and_(pc.greater_equal(data.column("index"), start), pc.less(data.column("index"), stop))
                    rows = data.filter(mask).sort_by("index")
                    if rows.num_rows != stop - start or rows.num_rows != int(meta["length"]):
                        raise DatasetError(f"{root} episode {meta['episode_index']}: {rows.num_rows} data rows with "
                                           f"index {start}..{stop - 1}, the episode's length is {meta['length']}")
                    episode = _decode_episode(root, info, meta, rows, tasks, cameras)
                    try:
                        _save_cache(path, episode, fingerprint)
                        episode = _load_cache(path, fingerprint) or episode
                    except OSError as exc:
                        logger.warning("cannot write cache entry %s: %s", path, exc)
                    out[i] = episode
                bar.update(1)
    logger.info("%s: %d episodes (LeRobot dataset, %d from the cache in %s)", root, len(out), from_cache,
                cache_dir)
    return out


def load_episodes(dirs: Sequence[str | os.PathLike], cache_dir: str | os.PathLike,
                  cameras: Sequence[str] = ("front", "wrist"), *, progress: bool | None = None
                  ) -> tuple[list[EpisodeArrays], list[EpisodeArrays], int]:
    """LeRobot datasets and bags (at or under the other paths) together -> (the datasets'
    episodes, the bags' episodes, bags found). Bags go through load_dataset (incomplete ones
    skipped there)."""
    from arm_act.bags import BagError, find_bags

    lerobot = [Path(d) for d in dirs if is_lerobot_dataset(d)]
    bag_paths = [d for d in dirs if not is_lerobot_dataset(d)]
    from_datasets: list[EpisodeArrays] = []
    for root in lerobot:
        from_datasets += load_lerobot(root, cache_dir, cameras, progress=progress)
    from_bags: list[EpisodeArrays] = []
    n_bags = 0
    if bag_paths:
        try:
            n_bags = len(find_bags(bag_paths))
        except BagError as exc:
            raise DatasetError(" ".join(str(exc).split())) from None
        from_bags = load_dataset(bag_paths, cache_dir, cameras, progress=progress)
    return from_datasets, from_bags, n_bags


def prepare_training_data(dirs: Sequence[str | os.PathLike], cache: Path, policy_config, train_config):
    """arm_act.data.training.prepare_training_data for --data paths that include LeRobot
    datasets: the same filtering (successful demonstrations, one control rate), pixel labels
    and grounding layouts, over load_episodes. Under torchrun every process decodes the
    LeRobot episodes the cache lacks (the cache's writes are atomic, so they do not collide)."""
    import collections

    from arm_act.data.training import TrainingData, grounding_frames, label_pixels

    from_datasets, from_bags, n_bags = load_episodes(dirs, cache, policy_config.cameras)
    episodes = from_datasets + from_bags
    incomplete = n_bags - len(from_bags)
    good = [e for e in episodes if e.success]
    failed = len(episodes) - len(good)
    if not good:
        raise DatasetError(f"none of the {len(episodes)} demonstrations succeeded; nothing to train on")
    control_rates = sorted({e.control_rate for e in good})
    if len(control_rates) > 1:
        raise DatasetError(f"the demonstrations mix control rates {control_rates} Hz; train on data of one "
                           "control rate")
    camera_rates = collections.Counter(e.camera_rate for e in good)
    info = {"dirs": [str(d) for d in dirs], "bags_found": n_bags, "control_rate": control_rates[0],
            "camera_rate": next(iter(camera_rates)) if len(camera_rates) == 1 else None,
            "camera_rates": {str(rate): camera_rates[rate] for rate in sorted(camera_rates)},
            "lerobot_datasets": [str(d) for d in dirs if is_lerobot_dataset(d)],
            "skipped_incomplete": incomplete, "skipped_failed": failed, "skipped_policy_only": 0, "cache": str(cache)}
    logger.info("training on %d demonstrations (%d frames); skipped %d failed and %d incomplete", len(good),
                sum(e.n_frames for e in good), failed, incomplete)
    grounding: list = []
    if policy_config.target_weight > 0:
        label_pixels(good, policy_config, cache)
    if train_config.grounding_layouts:
        grounding = grounding_frames(good, policy_config, train_config, cache)
        info["grounding_layouts"] = len(grounding)
    return TrainingData(good, grounding, info, n_bags + len(from_datasets), failed, incomplete)


def train_from_datasets(dirs: Sequence[str | os.PathLike], out: Path, cache: Path, policy_config, train_config,
                        **train_options):
    """arm_act.data.training.train_from_bags over LeRobot datasets and bags -> (metrics, data)."""
    from arm_act.common.instructions import FUNCTION_WORDS, training_phrasings_of
    from arm_act.policy.train import train

    data = prepare_training_data(dirs, cache, policy_config, train_config)
    metrics = train(data.demos, policy_config, train_config, out, data_info=data.info, grounding=data.grounding,
                    phrasings=training_phrasings_of, function_words=FUNCTION_WORDS, **train_options)
    return metrics, data
