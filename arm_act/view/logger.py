"""RunLogger: the live topics, as messages, into a Rerun recording (arm_act.view.layout).

One path for everything: the live bridge (arm_act.view.live) hands it rclpy messages as they
arrive, replay (arm_act.view.replay) hands it the messages of a bag as rosbags objects; both
carry the same field names, and the conversions of arm_act.ros.conversions read either. A
message is placed on the `sim_time` timeline at the sim time it was published or recorded.

What Rerun cannot know and this package adds: the policy's attention as a heat map over each
camera's patches, the predicted action chunk as a 3D path of the grasp point (forward
kinematics of every chunk step through the sim's own Panda model), the path the grasp point
actually took, and the target head's guess of the named block.

High-rate data (joint states and commands at 50-100 Hz, objects, diagnostics) is buffered and
sent as columns (rerun.send_columns) every flush_interval_s: logging row by row cost about
70-120 us per entity and message here (Python side), which at 20 entities x 100 Hz would be a
fifth of a core. Images and chunks (10 Hz) are logged as they come.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import rerun as rr

import arm_act.view.layout as L
from arm_act.common.viz import attention_rgba
from arm_act.ros import conversions as conv
from arm_act.sim.robot import ARM_JOINTS
from arm_act.sim.task import TABLE_CENTER, TABLE_HALF, TABLE_RGBA
from arm_act.view.kinematics import PandaKinematics, rpy_to_quat

logger = logging.getLogger(__name__)

ACTUAL_COLOUR = (31, 119, 180)
COMMAND_COLOUR = (255, 127, 14)
CHUNK_COLOUR = (230, 0, 200)  # magenta: no block has this colour
TARGET_COLOUR = (0, 230, 255)
ARM_COLOUR = (0.85, 0.85, 0.88, 1.0)
STATE_COLOURS = {"running": (90, 140, 220), "success": (40, 170, 70), "failure": (210, 50, 50),
                 "timeout": (230, 150, 30)}


@dataclass
class _Rows:
    """Rows of one message kind waiting to be sent: a sim time (ns) and the values of each."""

    times: list[int] = field(default_factory=list)
    values: list = field(default_factory=list)

    def add(self, ns: int, value) -> None:
        self.times.append(ns)
        self.values.append(value)

    def take(self) -> tuple[list[int], list]:
        times, values = self.times, self.values
        self.times, self.values = [], []
        return times, values


class RunLogger:
    """Turns messages of the live topics into a recording `rec` (a rerun.RecordingStream).

    handle(topic, stamp_ns, msg) for each message (topic: relative, absolute or namespaced),
    flush() to send what is buffered, close() at the end. Malformed messages are skipped with a
    debug log line, as the nodes do; counts of what was logged are in `counts`.
    """

    def __init__(self, rec: rr.RecordingStream, cameras: Sequence[str] = L.CAMERAS,
                 kinematics: PandaKinematics | None = None, flush_interval_s: float = 0.2):
        self.rec = rec
        self.cameras = tuple(cameras)
        self.kinematics = kinematics or PandaKinematics()
        self._owns_kinematics = kinematics is None
        self.flush_interval_s = float(flush_interval_s)
        self._rows = {kind: _Rows() for kind in ("joints", "arm", "gripper", "objects", "diagnostics")}
        self._last_flush = time.monotonic()
        self._image_shape: dict[str, tuple[int, int]] = {}
        self._path: list[np.ndarray] = []  # grasp points since the episode began
        self.counts: dict[str, int] = {}
        self.skipped = 0
        self._handlers = {"joint_states": self._joint_state, "objects": self._objects, "task": self._task,
                          "episode": self._episode, conv.ARM_COMMAND_TOPIC: self._arm_command,
                          conv.GRIPPER_COMMAND_TOPIC: self._gripper_command,
                          "policy/attention": self._attention, "policy/action_chunk": self._chunk,
                          "policy/instruction_attention": self._words,
                          "policy/diagnostics": self._diagnostics}
        for camera in self.cameras:
            self._handlers[f"camera/{camera}/image_raw"] = (
                lambda ns, msg, c=camera: self._image(c, ns, msg))
        self._resolved: dict[str, object] = {}
        self._log_static()

    # ------------------------------------------------------------ static scene and styles
    def _log_static(self) -> None:
        log = self.rec.log
        log("world", rr.ViewCoordinates.RIGHT_HAND_Z_UP, static=True)
        log(L.TABLE, rr.Boxes3D(centers=[TABLE_CENTER], half_sizes=[TABLE_HALF],
                                colors=[[int(255 * c) for c in TABLE_RGBA[:3]]], fill_mode="solid"), static=True)
        for visual in self.kinematics.visuals:
            mesh = f"{L.robot_link(visual.link)}/mesh"
            log(mesh, rr.Asset3D(path=visual.mesh, albedo_factor=ARM_COLOUR), static=True)
            log(mesh, rr.Transform3D(translation=visual.xyz, quaternion=rr.Quaternion(xyzw=rpy_to_quat(visual.rpy))),
                static=True)
        for joint in ARM_JOINTS:
            log(L.joint_actual(joint), rr.SeriesLines(colors=ACTUAL_COLOUR, names="actual", widths=1.5), static=True)
            log(L.joint_command(joint), rr.SeriesLines(colors=COMMAND_COLOUR, names="command", widths=1.0),
                static=True)
        log(L.GRIPPER_ACTUAL, rr.SeriesLines(colors=ACTUAL_COLOUR, names="actual (mm)"), static=True)
        log(L.GRIPPER_COMMAND, rr.SeriesLines(colors=COMMAND_COLOUR, names="command (mm)"), static=True)
        for key in L.DIAGNOSTIC_KEYS:
            log(L.diagnostic(key), rr.SeriesLines(names=key), static=True)
        log(L.EE_ACTUAL, rr.Points3D.from_fields(colors=ACTUAL_COLOUR, radii=0.008), static=True)
        log(L.EE_PATH, rr.LineStrips3D.from_fields(colors=ACTUAL_COLOUR, radii=0.003), static=True)
        log(L.CHUNK_PATH, rr.LineStrips3D.from_fields(colors=CHUNK_COLOUR, radii=0.004), static=True)
        log(L.TARGET_GUESS, rr.Points3D.from_fields(colors=TARGET_COLOUR, radii=0.015, labels="target guess"),
            static=True)
        log(L.BLOCKS, rr.Boxes3D.from_fields(fill_mode=rr.components.FillMode.Solid, show_labels=False), static=True)
        log(L.BOX, rr.Boxes3D.from_fields(fill_mode=rr.components.FillMode.MajorWireframe, radii=0.004,
                                          show_labels=False), static=True)
        log(L.EPISODE_STATE, rr.StateConfiguration(values=list(STATE_COLOURS), colors=list(STATE_COLOURS.values())),
            static=True)

    # ------------------------------------------------------------ entry points
    def _handler(self, topic: str):
        """The handler of a topic name, under any namespace ("/robot1/joint_states" is
        joint_states, as `ros2 launch ... namespace:=robot1` records it); None if not shown."""
        if topic not in self._resolved:
            parts = topic.strip("/").split("/")
            self._resolved[topic] = next((self._handlers[name] for name in
                                          ("/".join(parts[i:]) for i in range(len(parts)))
                                          if name in self._handlers), None)
        return self._resolved[topic]

    def handle(self, topic: str, stamp_ns: int, msg) -> bool:
        """Log one message; False when the topic is not shown or the message was malformed."""
        handler = self._handler(topic)
        if handler is None:
            return False
        try:
            handler(int(stamp_ns), msg)
        except (conv.ConversionError, ValueError, IndexError, AttributeError) as exc:
            self.skipped += 1
            logger.debug("skipped a %s message: %s", topic, exc)
            return False
        if time.monotonic() - self._last_flush > self.flush_interval_s:
            self.flush()
        return True

    def flush(self) -> None:
        """Send the buffered rows as columns (one send per entity)."""
        send = self._send
        times, rows = self._rows["joints"].take()
        if rows:
            q = np.array([r[0] for r in rows])  # (T, 9)
            poses = np.array([r[1] for r in rows])  # (T, L, 7)
            for j, joint in enumerate(ARM_JOINTS):
                send(L.joint_actual(joint), times, rr.Scalars.columns(scalars=q[:, j]))
            send(L.GRIPPER_ACTUAL, times, rr.Scalars.columns(scalars=1000.0 * q[:, 7:9].mean(axis=1)))
            for k, visual in enumerate(self.kinematics.visuals):
                send(L.robot_link(visual.link), times,
                     rr.Transform3D.columns(translation=poses[:, k, :3], quaternion=poses[:, k, 3:]))
            send(L.EE_ACTUAL, times, rr.Points3D.columns(positions=np.array([r[2] for r in rows])))
        times, rows = self._rows["arm"].take()
        if rows:
            arm = np.array(rows)  # (T, 7)
            for j, joint in enumerate(ARM_JOINTS):
                send(L.joint_command(joint), times, rr.Scalars.columns(scalars=arm[:, j]))
        times, rows = self._rows["gripper"].take()
        if rows:
            send(L.GRIPPER_COMMAND, times, rr.Scalars.columns(scalars=1000.0 * np.array(rows)))
        times, rows = self._rows["objects"].take()
        for index, entity in enumerate((L.BLOCKS, L.BOX)):
            group = [(t, r[index]) for t, r in zip(times, rows, strict=True) if r[index] is not None]
            if group:
                boxes = [b for _, b in group]
                columns = rr.Boxes3D.columns(
                    centers=np.concatenate([b["centers"] for b in boxes]),
                    half_sizes=np.concatenate([b["half_sizes"] for b in boxes]),
                    quaternions=np.concatenate([b["quaternions"] for b in boxes]),
                    colors=np.concatenate([b["colors"] for b in boxes]),
                    labels=[label for b in boxes for label in b["labels"]])
                send(entity, [t for t, _ in group], columns.partition([len(b["labels"]) for b in boxes]))
        times, rows = self._rows["diagnostics"].take()
        for key in L.DIAGNOSTIC_KEYS:
            group = [(t, r[key]) for t, r in zip(times, rows, strict=True) if key in r]
            if group:
                send(L.diagnostic(key), [t for t, _ in group], rr.Scalars.columns(scalars=[v for _, v in group]))
        self._last_flush = time.monotonic()

    def _send(self, entity: str, times: list[int], columns) -> None:
        index = rr.TimeColumn(L.TIMELINE, duration=np.array(times, dtype="timedelta64[ns]"))
        self.rec.send_columns(entity, indexes=[index], columns=columns)
        self.counts[entity] = self.counts.get(entity, 0) + len(times)

    def close(self) -> None:
        self.flush()
        self.rec.flush()
        if self._owns_kinematics:
            self.kinematics.close()

    # ------------------------------------------------------------ helpers
    def _count(self, entity: str) -> None:
        self.counts[entity] = self.counts.get(entity, 0) + 1

    def _log(self, entity: str, ns: int, archetype) -> None:
        self.rec.set_time(L.TIMELINE, duration=np.timedelta64(ns, "ns"))
        self.rec.log(entity, archetype)
        self._count(entity)

    # ------------------------------------------------------------ per topic
    def _image(self, camera: str, ns: int, msg) -> None:
        rgb = conv.image_from_msg(msg)
        self._image_shape[camera] = rgb.shape[:2]
        self._log(L.camera_image(camera), ns, rr.Image(rgb, draw_order=0.0))
        if camera == self.cameras[0] and len(self._path) > 1:
            self._log(L.EE_PATH, ns, rr.LineStrips3D([np.asarray(self._path)]))

    def _attention(self, ns: int, msg) -> None:
        for camera, grid in conv.attention_from_msg(msg).items():
            if camera not in self.cameras:
                continue
            height, width = self._image_shape.get(camera, (96, 96))
            self._log(L.camera_attention(camera), ns,
                      rr.Image(attention_rgba(grid, height, width), color_model="RGBA", draw_order=1.0))

    def _words(self, ns: int, msg) -> None:
        """Where the instruction's words look: the heat map from the weights' minimum (they
        spread over every patch, so the maximum alone would tint the whole image)."""
        for camera, grid in conv.attention_from_msg(msg).items():
            if camera not in self.cameras:
                continue
            height, width = self._image_shape.get(camera, (96, 96))
            self._log(L.words_attention(camera), ns,
                      rr.Image(attention_rgba(grid - grid.min(), height, width), color_model="RGBA", draw_order=1.0))

    def _joint_state(self, ns: int, msg) -> None:
        q = conv.joint_positions_from_msg(msg)  # (9,)
        poses, grasp = self.kinematics.poses(q)  # (L, 7), (3,)
        self._path.append(grasp)
        self._rows["joints"].add(ns, (q, poses, grasp))

    def _arm_command(self, ns: int, msg) -> None:
        self._rows["arm"].add(ns, conv.command_from_msg(msg, len(ARM_JOINTS), "arm"))

    def _gripper_command(self, ns: int, msg) -> None:
        self._rows["gripper"].add(ns, float(conv.command_from_msg(msg, 1, "gripper")[0]))

    def _objects(self, ns: int, msg) -> None:
        objects = conv.objects_from_msg(msg)
        groups = ([o for o in objects if o.kind != "box"], [o for o in objects if o.kind == "box"])
        row = []
        for group in groups:
            if not group:
                row.append(None)
                continue
            # A box's pose is its floor's (z = 0), its marker size the outer box: centre it.
            row.append({
                "centers": np.array([o.position + (0, 0, o.size[2] / 2 if o.kind == "box" else 0.0) for o in group]),
                "half_sizes": np.array([o.size / 2 for o in group]),
                "quaternions": np.array([o.orientation for o in group]),
                "colors": np.array([[int(255 * c) for c in o.rgba[:3]] for o in group], dtype=np.uint8),
                "labels": [o.colour if o.kind != "box" else "box" for o in group]})
        self._rows["objects"].add(ns, tuple(row))

    def _task(self, ns: int, msg) -> None:
        self._log(L.INSTRUCTION, ns, rr.TextDocument(f"**{msg.data}**", media_type="text/markdown"))

    def _episode(self, ns: int, msg) -> None:
        info = conv.episode_from_msg(msg)
        if info.state == "running":
            self._path = []
        self._log(L.EPISODE_STATE, ns, rr.StateChange(state=info.state))
        outcome = "running" if info.state == "running" else f"**{info.state}** after {info.time:.2f} s"
        self._log(L.EPISODE_STATUS, ns, rr.TextDocument(
            f"**{info.instruction}**\n\nepisode {info.episode}, seed {info.seed}, {info.n_blocks} blocks: {outcome}",
            media_type="text/markdown"))

    def _chunk(self, ns: int, msg) -> None:
        chunk = conv.action_chunk_from_msg(msg)  # (K, 8)
        if len(chunk) == 0:
            raise ValueError("empty action chunk")
        self._log(L.CHUNK_PATH, ns, rr.LineStrips3D([self.kinematics.chunk_path(chunk)]))

    def _diagnostics(self, ns: int, msg) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            self._rows["diagnostics"].add(ns, {k: _float(values[k]) for k in L.DIAGNOSTIC_KEYS if k in values})
            if "target_xyz_m" in values:
                xyz = np.array([float(v) for v in values["target_xyz_m"].split()])
                if xyz.shape != (3,):
                    raise ValueError(f"target_xyz_m {values['target_xyz_m']!r} is not three numbers")
                self._log(L.TARGET_GUESS, ns, rr.Points3D([xyz]))


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")
