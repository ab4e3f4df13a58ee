"""The pick-and-place task: table, open box, coloured blocks, layout sampling, success.

World frame = Panda base frame; the table top is the plane z = 0. The box is a static body
made of 5 thin boxes (floor + 4 walls, open top) at a fixed place; blocks are ~4 cm cubes of
distinct colours placed without overlap inside the arm's reach, all from the episode's
np.random.Generator (randomness is passed in, never global, as dm_control passes `random=`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from arm_act.sim.backend import Backend, quat_from_yaw
from arm_act.sim.config import COLOURS, SimConfig

RGBA: dict[str, tuple[float, float, float, float]] = {
    "red": (0.85, 0.08, 0.08, 1.0),
    "green": (0.10, 0.70, 0.15, 1.0),
    "blue": (0.10, 0.25, 0.95, 1.0),
    "yellow": (0.95, 0.88, 0.10, 1.0),
    "purple": (0.55, 0.12, 0.78, 1.0),
    "orange": (1.00, 0.50, 0.00, 1.0),
}
TABLE_RGBA = (0.62, 0.57, 0.50, 1.0)
BOX_RGBA = (0.33, 0.22, 0.13, 1.0)
BOX_WALL = 0.01  # wall and floor thickness (m)
TABLE_HALF = (0.65, 0.75, 0.02)
TABLE_CENTER = (0.35, 0.0, -0.02)
FELL_OFF_Z = -0.05
"""A block whose centre is this far below the table top has fallen off the table."""
RESTING_SPEED = 0.05
"""A block moving slower than this (m/s) counts as resting."""
OPEN_GRIPPER = 0.03
"""Per-finger opening (m) above which the gripper counts as open (released)."""


@dataclass(frozen=True)
class ObjectState:
    """Ground-truth state of one object. position (3,), orientation (4,) xyzw quaternion,
    size (3,) full extents in metres, rgba (4,)."""

    name: str
    kind: str
    colour: str
    rgba: np.ndarray
    position: np.ndarray
    orientation: np.ndarray
    size: np.ndarray


INSTRUCTION_TEMPLATE = "put the {colour} block in the box"
_INSTRUCTION = re.compile(re.escape(INSTRUCTION_TEMPLATE).replace(re.escape("{colour}"), r"(\w+)"))


def instruction_for(colour: str) -> str:
    return INSTRUCTION_TEMPLATE.format(colour=colour)


def parse_instruction(instruction: str) -> str | None:
    """The colour that an instruction in INSTRUCTION_TEMPLATE's form names ("put the red
    block in the box" -> "red"; surrounding whitespace ignored), else None."""
    match = _INSTRUCTION.fullmatch(str(instruction).strip())
    return None if match is None else match.group(1)


def sample_layout(rng: np.random.Generator, cfg: SimConfig, n_blocks: int
                  ) -> tuple[list[str], np.ndarray, np.ndarray, str]:
    """Colours (n,), block xy (n, 2), yaws (n,), target colour.

    Sequential rejection sampling with a minimum centre spacing that leaves room for the
    open fingers between blocks; restarts the whole layout if a block does not fit."""
    if not 1 <= n_blocks <= len(COLOURS):
        raise ValueError(f"n_blocks={n_blocks} must be in [1, {len(COLOURS)}]")
    colour_idx = rng.choice(len(COLOURS), size=n_blocks, replace=False)
    colours = [COLOURS[i] for i in colour_idx]
    x0, x1, y0, y1 = cfg.block_region
    for _ in range(1000):
        xy: list[np.ndarray] = []
        for _ in range(n_blocks):
            for _ in range(200):
                cand = np.array([rng.uniform(x0, x1), rng.uniform(y0, y1)])
                if all(np.linalg.norm(cand - p) >= cfg.min_block_spacing for p in xy):
                    xy.append(cand)
                    break
            else:
                break
        if len(xy) == n_blocks:
            break
    else:
        raise RuntimeError(f"could not place {n_blocks} blocks with spacing {cfg.min_block_spacing} "
                           f"in region {cfg.block_region}")
    # Cubes are 90-degree symmetric: a yaw in [-45, 45) deg covers every orientation.
    yaws = rng.uniform(-math.pi / 4, math.pi / 4, size=n_blocks)
    target = colours[int(rng.integers(n_blocks))]
    return colours, np.array(xy), yaws, target


class PickPlaceTask:
    """Creates the table, box and blocks in a world and judges the episode."""

    def __init__(self, backend: Backend, cfg: SimConfig) -> None:
        self._backend = backend
        self.cfg = cfg
        self.table = backend.create_boxes([TABLE_HALF], [(0, 0, 0)], TABLE_RGBA, TABLE_CENTER,
                                          lateral_friction=0.8)
        self.box = self._create_box()
        self.blocks: dict[str, int] = {}  # key (the colour, or "<colour>_2"... for copies) -> body
        self.block_colours: dict[str, str] = {}
        self.target_colour = ""

    def _create_box(self) -> int:
        cfg = self.cfg
        inner, h, t = cfg.box_inner_size / 2, cfg.box_wall_height, BOX_WALL
        half = [(inner + t, inner + t, t / 2),                        # floor
                (t / 2, inner + t, h / 2), (t / 2, inner + t, h / 2),  # walls at +-x
                (inner, t / 2, h / 2), (inner, t / 2, h / 2)]          # walls at +-y
        offs = [(0, 0, t / 2),
                (inner + t / 2, 0, h / 2), (-inner - t / 2, 0, h / 2),
                (0, inner + t / 2, h / 2), (0, -inner - t / 2, h / 2)]
        x, y = cfg.box_center
        return self._backend.create_boxes(half, offs, BOX_RGBA, (x, y, 0.0), lateral_friction=0.8)

    def reset(self, rng: np.random.Generator, n_blocks: int, crowd=None) -> None:
        """Sample and create the blocks (the world was emptied and table/box re-made).

        crowd(colours, xy, target) -> [(key, colour, xy, yaw)]: more blocks beyond the
        sampled layout (sim.perturb's crowded world); keys name them, colours may repeat
        (never the named one). Without it, keys are the colours."""
        colours, xy, yaws, target = sample_layout(rng, self.cfg, n_blocks)
        blocks = [(c, c, p, yaw) for c, p, yaw in zip(colours, xy, yaws, strict=True)]
        if crowd is not None:
            blocks += crowd(colours, xy, target)
        s = self.cfg.block_size
        self.blocks = {}
        self.block_colours = {}
        for key, colour, (x, y), yaw in blocks:
            body = self._backend.create_boxes(
                [(s / 2, s / 2, s / 2)], [(0, 0, 0)], RGBA[colour], (x, y, s / 2),
                quat_from_yaw(yaw), mass=self.cfg.block_mass, lateral_friction=1.0)
            self._backend.set_dynamics(body, -1, spinningFriction=0.001, rollingFriction=0.0)
            self.blocks[key] = body
            self.block_colours[key] = colour
        self.target_colour = target

    @property
    def instruction(self) -> str:
        return instruction_for(self.target_colour)

    def objects(self) -> list[ObjectState]:
        """Blocks in sampling order, then the box."""
        s = self.cfg.block_size
        out = []
        for key, body in self.blocks.items():
            pos, orn = self._backend.base_pose(body)
            colour = self.block_colours[key]
            out.append(ObjectState(f"block_{key}", "block", colour, np.array(RGBA[colour]), pos, orn,
                                   np.full(3, s)))
        pos, orn = self._backend.base_pose(self.box)
        outer = self.cfg.box_inner_size + 2 * BOX_WALL
        out.append(ObjectState("box", "box", "brown", np.array(BOX_RGBA), pos, orn,
                               np.array([outer, outer, self.cfg.box_wall_height])))
        return out

    def place_block(self, colour: str, position: np.ndarray, yaw: float = 0.0) -> None:
        """Teleport a block (for constructed test states)."""
        if colour not in self.blocks:
            raise KeyError(f"no {colour} block; blocks are {list(self.blocks)}")
        self._backend.set_base_pose(self.blocks[colour], position, quat_from_yaw(yaw))

    def in_box(self, colour: str) -> bool:
        """Block centre within the box's inner footprint and its top below the rim."""
        pos, orn = self._backend.base_pose(self.blocks[colour])
        bx, by = self.cfg.box_center
        # Inner footprint shrunk by half a block: the whole block, not just its centre, is inside.
        half = self.cfg.box_inner_size / 2 - self.cfg.block_size / 2 + 0.005
        inside = abs(pos[0] - bx) <= half and abs(pos[1] - by) <= half
        top = pos[2] + self.cfg.block_size / 2
        return inside and top <= self.cfg.box_wall_height + 0.002 and pos[2] > 0.0

    def fell_off(self, colour: str) -> bool:
        pos, _ = self._backend.base_pose(self.blocks[colour])
        return bool(pos[2] < FELL_OFF_Z)

    def status(self, gripper_opening: float) -> str:
        """"success" | "failure" | "running" from physics state (time limit is the env's)."""
        for colour in self.blocks:
            if self.fell_off(colour):
                return "failure"
            if colour != self.target_colour and self.in_box(colour):
                return "failure"
        target = self.target_colour
        if target and self.in_box(target) and gripper_opening > OPEN_GRIPPER:
            lin, _ = self._backend.base_velocity(self.blocks[target])
            if np.linalg.norm(lin) < RESTING_SPEED:
                return "success"
        return "running"
