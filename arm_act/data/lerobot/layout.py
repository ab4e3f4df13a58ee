"""The LeRobotDataset v3.0 layout as LeRobot itself writes it (lerobot/datasets/utils.py,
dataset_metadata.py, compute_stats.py, video_utils.py): paths, info.json, features, the
tasks and episodes tables, statistics, and the mp4 videos through PyAV.

One dataset directory:

    meta/info.json                          codebase_version "v3.0", fps, features, totals, path templates
    meta/stats.json                         per-feature min/max/mean/std/count and quantiles q01..q99
    meta/tasks.parquet                      task (the pandas index) -> task_index
    meta/episodes/chunk-000/file-000.parquet  one row per episode: index range, tasks, length,
                                            data and video file indices, video from/to timestamps, stats/...
    data/chunk-000/file-000.parquet         one row per control tick
    videos/observation.images.<camera>/chunk-000/file-000.mp4   every episode's frames, one after another

Video frames are stamped with their row's global index / fps, so an episode's frames
start at its from_timestamp (= dataset_from_index / fps) and LeRobot's decoder finds
the frame of each row at from_timestamp + timestamp.
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000  # LeRobot's DEFAULT_CHUNK_SIZE: files per chunk directory
DATA_FILES_SIZE_IN_MB = 100
VIDEO_FILES_SIZE_IN_MB = 500
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
ROBOT_TYPE = "franka_panda"

STATE = "observation.state"
ACTION = "action"
# Our own per-row features. Neither starts with "observation" or "action", so LeRobot's
# dataset_to_policy_features leaves them out of a policy's inputs.
CAMERA_FRAME = "camera_frame"  # bool: the row's images are a new camera frame (not one held from an earlier row)
TARGET = "target_position"  # the named block's position (m, world frame), NaN where unknown
# Per-episode columns of meta/episodes that only arm-act reads (LeRobot ignores unknown columns).
EPISODE_EXTRAS = ("arm_act/bag", "arm_act/success", "arm_act/status", "arm_act/seed", "arm_act/n_blocks",
                  "arm_act/camera_rate", "arm_act/first_tick")
DEFAULT_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}


def image_key(camera: str) -> str:
    return f"observation.images.{camera}"


@dataclass(frozen=True)
class Codec:
    """How the videos are encoded: FFmpeg encoder, pixel format, encoder options, and the
    codec name info.json records (video.codec, as LeRobot's get_video_info reports it)."""

    name: str
    encoder: str
    pix_fmt: str
    options: dict


# h264 (default): libx264 at qp 0, lossless in YUV; 4:4:4 keeps the colour of blocks a few
# pixels wide, which 4:2:0 halves. Only the RGB <-> YUV conversion rounds.
# av1: LeRobot's own default (libsvtav1, yuv420p, crf 30), smaller files, lossy.
# Both use LeRobot's keyframe interval g=2, so a decoder reaches any frame cheaply.
CODECS = {
    "h264": Codec("h264", "libx264", "yuv444p", {"qp": "0", "g": "2"}),
    "av1": Codec("av1", "libsvtav1", "yuv420p", {"crf": "30", "g": "2"}),
}


def state_names(joint_names) -> list[str]:
    return list(joint_names)


def action_names(joint_names) -> list[str]:
    """The 7 arm joint targets, then the gripper opening (the order of EpisodeArrays.commands)."""
    return [f"{name}.target" for name in list(joint_names)[:7]] + ["gripper.opening"]


def features(cameras, height: int, width: int, fps: int, codec: Codec, joint_names) -> dict:
    """info.json's features: ours, then LeRobot's DEFAULT_FEATURES, as LeRobotDatasetMetadata.create
    orders them."""
    out = {
        STATE: {"dtype": "float32", "shape": [len(joint_names)], "names": state_names(joint_names)},
        ACTION: {"dtype": "float32", "shape": [8], "names": action_names(joint_names)},
    }
    for camera in cameras:
        out[image_key(camera)] = {
            "dtype": "video", "shape": [height, width, 3], "names": ["height", "width", "channels"],
            "info": {"video.height": height, "video.width": width, "video.codec": codec.name,
                     "video.pix_fmt": codec.pix_fmt, "video.is_depth_map": False, "video.fps": fps,
                     "video.channels": 3, "has_audio": False}}
    out[CAMERA_FRAME] = {"dtype": "bool", "shape": [1], "names": None}
    out[TARGET] = {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]}
    return {**out, **DEFAULT_FEATURES}


def info_json(fps: int, feature_map: dict, total_episodes: int, total_frames: int, total_tasks: int) -> dict:
    """meta/info.json, with the keys of LeRobot's create_empty_dataset_info."""
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": ROBOT_TYPE,
        "total_episodes": total_episodes,
        "total_frames": total_frames,
        "total_tasks": total_tasks,
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": DATA_FILES_SIZE_IN_MB,
        "video_files_size_in_mb": VIDEO_FILES_SIZE_IN_MB,
        "fps": fps,
        "splits": {"train": f"0:{total_episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH,
        "features": feature_map,
    }


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=4, ensure_ascii=False))


# ---------------------------------------------------------------- parquet tables
def vector_column(values: np.ndarray):
    """(N, D) -> a fixed_size_list<D> column, the Arrow type `datasets.Sequence(length=D)`
    has, which LeRobot's data files carry."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])


def column_array(column, width: int | None = None) -> np.ndarray:
    """A parquet column (scalar, or list / fixed_size_list of equal lengths) -> numpy:
    (N,) or (N, width)."""
    import pyarrow as pa

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type) \
            or pa.types.is_fixed_size_list(column.type):
        flat = column.flatten().to_numpy(zero_copy_only=False)
        if width is None or flat.size != len(column) * width:
            raise ValueError(f"rows of {flat.size / max(len(column), 1):g} values, expected {width}")
        return flat.reshape(len(column), width)
    return column.to_numpy(zero_copy_only=False)


def write_tasks(path: Path, tasks: list[str]) -> None:
    """meta/tasks.parquet as pandas writes LeRobot's tasks DataFrame: column task_index, the
    task strings as the index (a column "task" plus the pandas metadata naming it the index),
    so pd.read_parquet gives LeRobot the frame it indexes by task."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                            "metadata": {"encoding": "UTF-8"}}],
        "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                     "numpy_type": "int64", "metadata": None},
                    {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object",
                     "metadata": None}],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})
    table = table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


# ---------------------------------------------------------------- statistics
def vector_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """compute_stats.get_feature_stats over rows of (N, D) values, plus LeRobot's quantiles."""
    values = np.asarray(values, np.float64)
    stats = {"min": values.min(axis=0), "max": values.max(axis=0), "mean": values.mean(axis=0),
             "std": values.std(axis=0), "count": np.array([len(values)])}
    stats.update({name: np.quantile(values, q, axis=0) for name, q in QUANTILES.items()})
    return stats


def image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel statistics of uint8 (N, H, W, 3) frames scaled to [0, 1], each (3, 1, 1)
    as LeRobot's compute_episode_stats keeps them; count = N."""
    pixels = np.asarray(frames, np.float64).reshape(-1, 3) / 255.0
    stats = vector_stats(pixels)
    stats = {k: v.reshape(3, 1, 1) for k, v in stats.items() if k != "count"}
    stats["count"] = np.array([len(frames)])
    return stats


def aggregate_stats(per_episode: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """compute_stats.aggregate_feature_stats: min/max over episodes, count-weighted mean,
    the pooled variance, and count-weighted means of the quantiles."""
    counts = np.array([float(s["count"][0]) for s in per_episode])
    shape = (-1,) + (1,) * (np.asarray(per_episode[0]["mean"]).ndim)
    weights = (counts / counts.sum()).reshape(shape)
    means = np.stack([s["mean"] for s in per_episode])
    mean = (means * weights).sum(axis=0)
    variance = ((np.stack([s["std"] for s in per_episode]) ** 2 + (means - mean) ** 2) * weights).sum(axis=0)
    out = {"min": np.min(np.stack([s["min"] for s in per_episode]), axis=0),
           "max": np.max(np.stack([s["max"] for s in per_episode]), axis=0),
           "mean": mean, "std": np.sqrt(variance), "count": np.array([int(counts.sum())])}
    for name in QUANTILES:
        out[name] = (np.stack([s[name] for s in per_episode]) * weights).sum(axis=0)
    return out


def stats_to_json(stats: dict[str, dict[str, np.ndarray]]) -> dict:
    return {key: {name: np.asarray(v).tolist() for name, v in feature.items()} for key, feature in stats.items()}


# ---------------------------------------------------------------- videos
class VideoWriter:
    """One mp4 of RGB frames at `fps`, frame n stamped n / fps (n counts from 0 over the
    whole file, so episodes follow each other without a gap)."""

    def __init__(self, path: Path, fps: int, height: int, width: int, codec: Codec):
        import av

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.fps, self.frames = path, fps, 0
        self._container = av.open(str(path), "w")
        self._stream = self._container.add_stream(codec.encoder, rate=fps)
        self._stream.width, self._stream.height = width, height
        self._stream.pix_fmt = codec.pix_fmt
        self._stream.options = dict(codec.options)
        self._stream.codec_context.time_base = Fraction(1, fps)

    def write(self, frames: np.ndarray) -> None:
        import av

        with keep_thread_scheduling():
            for image in frames:
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
                frame.pts, frame.time_base = self.frames, Fraction(1, self.fps)
                self.frames += 1
                for packet in self._stream.encode(frame):
                    self._container.mux(packet)

    def close(self) -> None:
        if self._container is None:
            return
        try:
            with keep_thread_scheduling():
                for packet in self._stream.encode():
                    self._container.mux(packet)
        finally:
            self._container.close()
            self._container = None


@contextlib.contextmanager
def keep_thread_scheduling():
    """Give the calling thread back its scheduling policy and priority afterwards. The AV1
    encoder (libsvtav1), run with the privilege to do so (root), puts the thread that starts
    it on SCHED_FIFO at priority 99, where a busy Python thread can starve the whole machine."""
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        if (os.sched_getscheduler(0), os.sched_getparam(0)) != (policy, param):
            os.sched_setscheduler(0, policy, param)


def read_video_frames(path: Path, from_timestamp: float, fps: int, rows: np.ndarray, shape: tuple[int, int]
                      ) -> np.ndarray:
    """The frames of an episode's `rows` (sorted row numbers within the episode) from the
    mp4 holding it, whose first frame is at from_timestamp -> (len(rows), H, W, 3) uint8.
    A frame belongs to the row round((time - from_timestamp) * fps), as LeRobot matches
    frames to rows by timestamp. ValueError when a row's frame is missing or of another size."""
    import av

    out = np.zeros((len(rows), *shape, 3), np.uint8)
    if len(rows) == 0:
        return out
    slot = {int(row): i for i, row in enumerate(rows)}
    found = np.zeros(len(rows), bool)
    last = int(rows[-1])
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        start = from_timestamp + int(rows[0]) / fps
        container.seek(max(0, int((start - 0.5 / fps) / stream.time_base)), stream=stream, backward=True)
        for frame in container.decode(stream):
            if frame.time is None:
                continue
            row = round((frame.time - from_timestamp) * fps)
            if row > last:
                break
            if row in slot:
                if (frame.height, frame.width) != shape:
                    raise ValueError(f"frames are {frame.width}x{frame.height}, info.json says "
                                     f"{shape[1]}x{shape[0]}")
                out[slot[row]] = frame.to_ndarray(format="rgb24")
                found[slot[row]] = True
    if not found.all():
        missing = rows[~found]
        raise ValueError(f"no frame for {len(missing)} of {len(rows)} rows (first: row {int(missing[0])}, "
                         f"t={from_timestamp + int(missing[0]) / fps:.3f} s)")
    return out
