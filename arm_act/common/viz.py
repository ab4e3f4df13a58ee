"""Pictures of what the policy sees: camera images with its cross-attention over the image
patches drawn on top, the instruction, commanded vs actual gripper, and a strip of the
joints over the last seconds. Used by the live view of `arm-act demo` (window or MP4), the
videos of `arm-act eval --video`, and (the heat map) the Rerun viewer, arm_act.view."""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

SCALE = 3  # 96 px cameras drawn at 288 px


HEAT_ALPHA = 0.6  # opacity of the most attended patch; unattended patches stay as the camera saw them


def attention_heat(grid: np.ndarray, height: int, width: int) -> np.ndarray:
    """(g, g) attention weights -> (height, width) float32 in 0..1, normalised to the grid's
    maximum, each patch a constant block (nearest-neighbour upscaling)."""
    g = np.asarray(grid, dtype=np.float32)
    if g.ndim != 2 or g.size == 0:
        raise ValueError(f"attention grid has shape {g.shape}, expected (rows, cols)")
    peak = float(g.max())
    heat = g / peak if peak > 0 else np.zeros_like(g)
    return cv2.resize(heat, (width, height), interpolation=cv2.INTER_NEAREST)


def heat_colours(heat: np.ndarray) -> np.ndarray:
    """(H, W) float in 0..1 -> (H, W, 3) uint8 RGB (inferno colour map)."""
    return cv2.applyColorMap((np.clip(heat, 0, 1) * 255).astype(np.uint8), cv2.COLORMAP_INFERNO)[:, :, ::-1]


def attention_rgba(grid: np.ndarray, height: int, width: int) -> np.ndarray:
    """(g, g) attention -> (height, width, 4) uint8 RGBA heat map whose opacity follows the
    weight, to lay over a camera image (Rerun draws it as its own layer)."""
    heat = attention_heat(grid, height, width)
    alpha = (HEAT_ALPHA * 255 * heat).astype(np.uint8)
    return np.concatenate([heat_colours(heat), alpha[:, :, None]], axis=2)


def attention_overlay(rgb: np.ndarray, grid: np.ndarray | None, scale: int = SCALE) -> np.ndarray:
    """(H, W, 3) uint8 RGB + (g, g) attention -> (H*scale, W*scale, 3) uint8 RGB with the
    weights as a heat map (normalised to this image's maximum) and the patch grid."""
    big = cv2.resize(np.ascontiguousarray(rgb), None, fx=scale, fy=scale, interpolation=cv2.INTER_NEAREST)
    if grid is None:
        return big
    g = np.asarray(grid, dtype=np.float32)
    heat = attention_heat(g, big.shape[0], big.shape[1])
    alpha = (HEAT_ALPHA * heat)[:, :, None]
    out = (big * (1 - alpha) + heat_colours(heat) * alpha).astype(np.uint8)
    step_y, step_x = big.shape[0] // g.shape[0], big.shape[1] // g.shape[1]
    out[::step_y, :, :] = (out[::step_y, :, :] * 0.75).astype(np.uint8)  # faint patch grid
    out[:, ::step_x, :] = (out[:, ::step_x, :] * 0.75).astype(np.uint8)
    return out


# Joint colours of the strip (RGB), joints 1..7; the gripper is white.
JOINT_COLOURS = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
                 (140, 86, 75), (227, 119, 194))


class JointStrip:
    """A small rolling plot for the video: the 7 arm joints (rad, solid: actual, thin: the
    command) and the gripper opening (mm, below) over the last span_s seconds of sim time.

    add_state(t, positions (9,)) per joint state, add_command(t, arm (7,) | None, gripper |
    None) per command; render(width) draws the strip as an (height, width, 3) RGB image."""

    JOINT_RANGE = (-3.0, 3.0)  # rad: the Panda's joints stay within it
    GRIPPER_RANGE = (0.0, 0.04)  # m

    def __init__(self, span_s: float = 4.0, height: int = 96):
        if span_s <= 0 or height < 32:
            raise ValueError(f"span_s={span_s} must be > 0 and height={height} >= 32")
        self.span_s, self.height = float(span_s), int(height)
        self._states: list[tuple[float, np.ndarray]] = []
        self._arm: list[tuple[float, np.ndarray]] = []
        self._gripper: list[tuple[float, float]] = []

    def _trim(self, series: list, now: float) -> None:
        while series and series[0][0] < now - self.span_s:
            series.pop(0)

    def add_state(self, t: float, positions: np.ndarray) -> None:
        self._states.append((float(t), np.asarray(positions, dtype=np.float64)[:9].copy()))
        self._trim(self._states, t)

    def add_command(self, t: float, arm: np.ndarray | None = None, gripper: float | None = None) -> None:
        if arm is not None:
            self._arm.append((float(t), np.asarray(arm, dtype=np.float64)[:7].copy()))
            self._trim(self._arm, t)
        if gripper is not None:
            self._gripper.append((float(t), float(gripper)))
            self._trim(self._gripper, t)

    def render(self, width: int) -> np.ndarray:
        strip = np.full((self.height, width, 3), 18, np.uint8)
        font = cv2.FONT_HERSHEY_SIMPLEX
        joints_h = int(self.height * 0.68)
        lanes = ((4, joints_h - 2, self.JOINT_RANGE), (joints_h + 4, self.height - 4, self.GRIPPER_RANGE))
        for top, bottom, _ in lanes:
            cv2.rectangle(strip, (0, top), (width - 1, bottom), (45, 45, 45), 1)
        if not self._states:
            return strip
        now = self._states[-1][0]
        left = 70

        def points(series, value_of, lane) -> np.ndarray:
            top, bottom, (lo, hi) = lane
            pts = [(left + (t - (now - self.span_s)) / self.span_s * (width - left - 4),
                    bottom - (np.clip(value_of(v), lo, hi) - lo) / (hi - lo) * (bottom - top)) for t, v in series]
            return np.round(np.array(pts)).astype(np.int32).reshape(-1, 1, 2)

        for j, colour in enumerate(JOINT_COLOURS):
            if self._arm:
                cv2.polylines(strip, [points(self._arm, lambda v, j=j: v[j], lanes[0])], False,
                              tuple(int(c * 0.6) for c in colour), 1, cv2.LINE_AA)
            cv2.polylines(strip, [points(self._states, lambda v, j=j: v[j], lanes[0])], False, colour, 2,
                          cv2.LINE_AA)
        if self._gripper:
            cv2.polylines(strip, [points(self._gripper, lambda v: v, lanes[1])], False, (130, 130, 130), 1,
                          cv2.LINE_AA)
        cv2.polylines(strip, [points(self._states, lambda v: v[7:9].mean(), lanes[1])], False, (255, 255, 255), 2,
                      cv2.LINE_AA)
        cv2.putText(strip, "joints", (6, 20), font, 0.4, (220, 220, 220), 1, cv2.LINE_AA)
        cv2.putText(strip, "rad", (6, 36), font, 0.35, (150, 150, 150), 1, cv2.LINE_AA)
        cv2.putText(strip, "gripper", (6, joints_h + 18), font, 0.4, (220, 220, 220), 1, cv2.LINE_AA)
        cv2.putText(strip, f"last {self.span_s:.0f} s", (6, 52), font, 0.35, (150, 150, 150), 1, cv2.LINE_AA)
        return strip


def compose_frame(images: dict[str, np.ndarray], attention: dict[str, np.ndarray] | None, instruction: str,
                  status: str, gripper_command: float | None, gripper_actual: float | None,
                  time_s: float, marks: dict[str, np.ndarray] | None = None,
                  strip: JointStrip | None = None) -> np.ndarray:
    """One RGB frame: the cameras side by side with attention, and a caption bar. marks:
    {camera: (u, v) pixel} drawn as a cyan cross (where the policy thinks the named block is);
    strip: a JointStrip drawn below the caption (joints and gripper, actual and commanded)."""
    panels = [attention_overlay(rgb, attention.get(name) if attention else None) for name, rgb in images.items()]
    for name, panel in zip(images, panels, strict=True):
        uv = (marks or {}).get(name)
        if uv is not None and np.all(np.isfinite(uv)):
            u, v = (int(round(c * SCALE)) for c in uv)
            if 0 <= u < panel.shape[1] and 0 <= v < panel.shape[0]:
                cv2.drawMarker(panel, (u, v), (0, 255, 255), cv2.MARKER_CROSS, 18, 2, cv2.LINE_AA)
    row = np.concatenate(panels, axis=1)
    caption = np.full((64, row.shape[1], 3), 30, np.uint8)
    font = cv2.FONT_HERSHEY_SIMPLEX
    cv2.putText(caption, instruction, (8, 22), font, 0.55, (255, 255, 255), 1, cv2.LINE_AA)
    grip = "gripper cmd {} / actual {}".format(
        "-" if gripper_command is None else f"{gripper_command * 1000:.0f} mm",
        "-" if gripper_actual is None else f"{gripper_actual * 1000:.0f} mm",
    )
    cv2.putText(caption, f"t={time_s:5.2f}s  {status}  {grip}", (8, 48), font, 0.5, (200, 200, 200), 1, cv2.LINE_AA)
    x = 8
    for name, panel in zip(images, panels, strict=True):
        cv2.putText(row, name, (x, 16), font, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
        x += panel.shape[1]
    parts = [row, caption] if strip is None else [row, caption, strip.render(row.shape[1])]
    return np.concatenate(parts, axis=0)


class VideoWriter:
    """MP4 (mp4v) writer of RGB frames at a fixed rate; opens on the first frame."""

    def __init__(self, path: Path, fps: float):
        self.path, self.fps = Path(path), float(fps)
        self._writer = None
        self.frames = 0

    def write(self, rgb: np.ndarray) -> None:
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            h, w = rgb.shape[:2]
            self._writer = cv2.VideoWriter(str(self.path), cv2.VideoWriter_fourcc(*"mp4v"), self.fps, (w, h))
            if not self._writer.isOpened():
                raise OSError(f"cannot open video file {self.path} for writing")
        self._writer.write(np.ascontiguousarray(rgb[:, :, ::-1]))
        self.frames += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
