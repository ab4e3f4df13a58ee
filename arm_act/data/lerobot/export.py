"""Demonstration bags -> one LeRobotDataset v3.0 directory (`arm-act export --format lerobot`;
the layout: arm_act/data/lerobot/layout.py).

Rows and frames. A row is a control tick (fps = the control rate), from the episode's first
camera frame to its last command: observation.state is the joint state at that tick, action
the command in force at it. Cameras run slower (every control_rate / camera_rate ticks), so
each row's images are the latest camera frame at or before its tick, held until the next
one; `camera_frame` is true on the rows where a new frame arrived (the frames the bag
recorded, with the joint state stamped with that frame, exactly as EpisodeArrays has them).
The videos are at fps too, one frame per row, as LeRobot's decoder expects. Commands before
the first camera frame (a takeover bag's policy part) have no observation and are not
exported; the report counts them.

What is not exported, each listed in the report: incomplete bags, failed demonstrations
(unless include_failed), and episodes without a camera frame. A bag that cannot be read,
or one at a different control rate or image size than the first, stops the export with a
DatasetError naming it. The dataset is written into a hidden sibling directory and renamed
into place at the end, so an interrupted export leaves no half dataset behind.
"""
from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arm_act.bags import BagError, bag_info, find_bags
from arm_act.common.progress import progress_bar
from arm_act.data.dataset import DatasetError, EpisodeArrays, extract_episode_with_tick_state
from arm_act.data.lerobot import layout
from arm_act.sim.robot import JOINT_NAMES

logger = logging.getLogger(__name__)

IMAGE_STATS_SAMPLES = 100  # rows per episode and camera that image statistics sample, as LeRobot's sample_indices


@dataclass
class EpisodeRows:
    """One episode as rows, R = ticks from the first camera frame to the last command."""

    first_tick: int  # the episode tick of row 0
    state: np.ndarray  # (R, 9) float32
    action: np.ndarray  # (R, 8) float32
    camera_frame: np.ndarray  # (R,) bool: a new camera frame arrives at this row
    target: np.ndarray  # (R, 3) float32, the held frame's target
    frame_of_row: np.ndarray  # (R,) int64: the EpisodeArrays frame each row shows

    @property
    def n_rows(self) -> int:
        return len(self.action)


def episode_rows(episode: EpisodeArrays, tick_state: np.ndarray) -> EpisodeRows:
    """The rows of an episode with at least one frame (module docstring). DatasetError when
    two frames fall on one tick (cameras faster than the control rate)."""
    ticks = np.asarray(episode.frame_ticks, np.int64)
    if np.any(np.diff(ticks) <= 0):
        raise DatasetError(f"{episode.bag}: two camera frames fall on one control tick; a dataset with a "
                           f"row per tick ({episode.control_rate} Hz) cannot hold cameras at "
                           f"{episode.camera_rate} Hz")
    first, n_ticks = int(ticks[0]), episode.n_ticks
    frame_of_row = np.searchsorted(ticks, np.arange(first, n_ticks), side="right") - 1
    camera_frame = np.zeros(n_ticks - first, bool)
    camera_frame[ticks - first] = True
    state = np.array(tick_state[first:], np.float32)
    state[ticks - first] = episode.frame_state  # exactly the state EpisodeArrays pairs with each frame
    for row in np.flatnonzero(np.isnan(state).any(axis=1)):  # no joint state yet at a tick: hold the last
        state[row] = state[row - 1]
    return EpisodeRows(first, state, np.array(episode.commands[first:], np.float32), camera_frame,
                       np.asarray(episode.frame_target, np.float32)[frame_of_row], frame_of_row)


@dataclass
class ExportReport:
    out: Path
    codec: str
    fps: int = 0
    bags_found: int = 0
    episodes: int = 0
    rows: int = 0
    camera_frames: int = 0
    tasks: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (bag, why)
    commands_before_first_frame: int = 0


class _DatasetWriter:
    """Appends episodes to the data parquet and the videos, keeps the episode table and the
    statistics, and writes meta/ at the end."""

    def __init__(self, root: Path, cameras: tuple[str, ...], codec: layout.Codec):
        self.root, self.cameras, self.codec = root, cameras, codec
        self.fps = self.shape = None
        self.videos: dict[str, layout.VideoWriter] = {}
        self.data = None
        self.tasks: dict[str, int] = {}
        self.episodes: list[dict] = []
        self.stats: list[dict[str, dict]] = []
        self.total_rows = self.camera_frames = 0

    def _open(self, episode: EpisodeArrays) -> None:
        import pyarrow.parquet as pq

        self.fps, self.shape = episode.control_rate, tuple(episode.images.shape[2:4])
        for camera in self.cameras:
            path = self.root / layout.VIDEO_PATH.format(video_key=layout.image_key(camera), chunk_index=0, file_index=0)
            self.videos[camera] = layout.VideoWriter(path, self.fps, *self.shape, self.codec)
        path = self.root / layout.DATA_PATH.format(chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.data = pq.ParquetWriter(path, self._schema(), compression="snappy")

    @staticmethod
    def _schema():
        import pyarrow as pa

        return pa.schema([(layout.STATE, pa.list_(pa.float32(), 9)), (layout.ACTION, pa.list_(pa.float32(), 8)),
                          (layout.CAMERA_FRAME, pa.bool_()), (layout.TARGET, pa.list_(pa.float32(), 3)),
                          ("timestamp", pa.float32()), ("frame_index", pa.int64()), ("episode_index", pa.int64()),
                          ("index", pa.int64()), ("task_index", pa.int64())])

    def add(self, episode: EpisodeArrays, rows: EpisodeRows) -> None:
        import pyarrow as pa

        if self.fps is None:
            self._open(episode)
        if episode.control_rate != self.fps or tuple(episode.images.shape[2:4]) != self.shape:
            raise DatasetError(f"{episode.bag}: {episode.control_rate} Hz, {episode.images.shape[3]}x"
                               f"{episode.images.shape[2]} images; the episodes before it are {self.fps} Hz, "
                               f"{self.shape[1]}x{self.shape[0]}: one dataset has one fps and one image size")
        index = len(self.episodes)
        task = self.tasks.setdefault(episode.instruction, len(self.tasks))
        n, start = rows.n_rows, self.total_rows
        columns = {
            "timestamp": (np.arange(n) / self.fps).astype(np.float32), "frame_index": np.arange(n, dtype=np.int64),
            "episode_index": np.full(n, index, np.int64), "index": np.arange(start, start + n, dtype=np.int64),
            "task_index": np.full(n, task, np.int64)}
        table = pa.table({layout.STATE: layout.vector_column(rows.state),
                          layout.ACTION: layout.vector_column(rows.action),
                          layout.CAMERA_FRAME: pa.array(rows.camera_frame),
                          layout.TARGET: layout.vector_column(rows.target),
                          **{name: pa.array(values) for name, values in columns.items()}}, schema=self._schema())
        self.data.write_table(table)
        sample = np.unique(np.round(np.linspace(0, n - 1, min(n, IMAGE_STATS_SAMPLES))).astype(np.int64))
        stats = {layout.STATE: layout.vector_stats(rows.state), layout.ACTION: layout.vector_stats(rows.action),
                 **{name: layout.vector_stats(values[:, None]) for name, values in columns.items()}}
        row = {"episode_index": index, "tasks": [episode.instruction], "length": n,
               "data/chunk_index": 0, "data/file_index": 0,
               "dataset_from_index": start, "dataset_to_index": start + n}
        for c, camera in enumerate(self.cameras):
            key = layout.image_key(camera)
            self.videos[camera].write(episode.images[rows.frame_of_row, c])
            stats[key] = layout.image_stats(episode.images[rows.frame_of_row[sample], c])
            row.update({f"videos/{key}/chunk_index": 0, f"videos/{key}/file_index": 0,
                        f"videos/{key}/from_timestamp": start / self.fps,
                        f"videos/{key}/to_timestamp": (start + n) / self.fps})
        row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
        row.update({f"stats/{key}/{name}": np.asarray(value).tolist()
                    for key, feature in stats.items() for name, value in feature.items()})
        row.update(dict(zip(layout.EPISODE_EXTRAS, (
            episode.bag, bool(episode.success), episode.status, int(episode.seed), int(episode.n_blocks),
            int(episode.camera_rate), rows.first_tick), strict=True)))
        self.episodes.append(row)
        self.stats.append(stats)
        self.total_rows += n
        self.camera_frames += int(rows.camera_frame.sum())

    def close(self) -> None:
        for video in self.videos.values():
            video.close()
        if self.data is not None:
            self.data.close()
            self.data = None

    def finish(self) -> None:
        """Close the files and write meta/: info.json, stats.json, tasks.parquet, episodes."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.close()
        tasks = sorted(self.tasks, key=self.tasks.get)
        layout.write_tasks(self.root / layout.TASKS_PATH, tasks)
        path = self.root / layout.EPISODES_PATH.format(chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(self.episodes), path, compression="snappy")
        stats = {key: layout.aggregate_stats([s[key] for s in self.stats]) for key in self.stats[0]}
        layout.write_json(self.root / layout.STATS_PATH, layout.stats_to_json(stats))
        feature_map = layout.features(self.cameras, *self.shape, self.fps, self.codec, JOINT_NAMES)
        layout.write_json(self.root / layout.INFO_PATH, layout.info_json(
            self.fps, feature_map, len(self.episodes), self.total_rows, len(tasks)))


def _prepare_out(out: Path, overwrite: bool) -> Path:
    """The hidden directory the export is written into before it is renamed to `out`."""
    if out.exists() and not out.is_dir():
        raise DatasetError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise DatasetError(f"{out}: exists and is not empty (--overwrite replaces it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    return staging


def _episode_of(bag: Path, cameras: tuple[str, ...], include_failed: bool, report: ExportReport
                ) -> tuple[EpisodeArrays, EpisodeRows] | None:
    """The bag's episode and rows, or None (with the reason added to the report's skipped)."""
    try:
        info = bag_info(bag)
    except BagError as exc:
        raise DatasetError(" ".join(str(exc).split())) from None
    except Exception as exc:  # noqa: BLE001 - a damaged file, one line
        raise DatasetError(f"{bag}: cannot read bag ({type(exc).__name__}: {' '.join(str(exc).split())})") from None
    why = None
    if not info.complete:
        why = f"incomplete bag ({info.problem})"
    else:
        episode, tick_state = extract_episode_with_tick_state(bag, cameras)
        if episode.n_frames == 0:
            why = f"no camera frame to export (status {episode.status!r})"
        elif not episode.success and not include_failed:
            why = f"failed demonstration (status {episode.status!r}; --include-failed exports it)"
    if why is not None:
        report.skipped.append((str(bag), why))
        logger.warning("skipping %s: %s", bag, why)
        return None
    return episode, episode_rows(episode, tick_state)


def export_lerobot(paths: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                   cameras: Sequence[str] = ("front", "wrist"), codec: str = "h264", include_failed: bool = False,
                   overwrite: bool = False, progress: bool | None = None) -> ExportReport:
    """Export every bag at or under `paths` (arm_act.bags.find_bags) into the LeRobotDataset
    v3.0 directory `out` (module docstring) -> what was exported and skipped. Raises
    DatasetError for a path without bags, a bag that cannot be read, an `out` that is not
    empty (unless overwrite), or when no episode is left to export."""
    out, cameras = Path(out), tuple(cameras)
    if codec not in layout.CODECS:
        raise DatasetError(f"codec {codec!r}: one of {', '.join(layout.CODECS)}")
    try:
        bags = find_bags(paths)
    except BagError as exc:
        raise DatasetError(" ".join(str(exc).split())) from None
    report = ExportReport(out=out, codec=codec, bags_found=len(bags))
    staging = _prepare_out(out, overwrite)
    writer = _DatasetWriter(staging, cameras, layout.CODECS[codec])
    try:
        with progress_bar(len(bags), "exporting bags", unit="bag", force=progress) as bar:
            for bag in bags:
                found = _episode_of(bag, cameras, include_failed, report)
                if found is not None:
                    episode, rows = found
                    writer.add(episode, rows)
                    report.commands_before_first_frame += rows.first_tick
                    logger.debug("%s: episode %d, %d rows", bag, len(writer.episodes) - 1, rows.n_rows)
                bar.update(1)
        if not writer.episodes:
            raise DatasetError(f"nothing to export: all {len(bags)} bags were skipped ("
                               + "; ".join(f"{b}: {why}" for b, why in report.skipped[:3])
                               + ("; ..." if len(report.skipped) > 3 else "") + ")")
        writer.finish()
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        writer.close()
        shutil.rmtree(staging, ignore_errors=True)
    report.fps, report.episodes, report.rows = writer.fps, len(writer.episodes), writer.total_rows
    report.camera_frames = writer.camera_frames
    report.tasks = sorted(writer.tasks, key=writer.tasks.get)
    return report
