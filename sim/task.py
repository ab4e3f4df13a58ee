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
from arm_act.sim.instructions import FAMILIES, RELATIONS, TASK_STREAM, TASKS, Goal

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


STACK_XY_TOLERANCE = 0.5
"""Stack success: the named block's centre within this fraction of the block size (2 cm for
4 cm blocks) of the reference's centre horizontally: its centre of mass well over the support."""
ON_TABLE_Z = 0.01
"""A block is on the table when its centre is within this (m) of half its size above z = 0."""
RELATION_RANGE = (0.04, 0.12)
"""Relation success: centre-to-centre distance (m) of the named block from the reference."""
RELATION_HALF_ANGLE = math.radians(45.0)
"""... and the direction from the reference to the named block strictly within this angle
of the relation's direction (four disjoint 90-degree sectors, one per relation)."""
RELATION_DIRECTIONS = {"left": (0.0, -1.0), "right": (0.0, 1.0), "front": (1.0, 0.0), "behind": (-1.0, 0.0)}
"""World xy direction of each relation as seen through the front camera, which looks along
-x from x = 1.18 m: its image right is +y, and nearer the camera is +x (docs/tasks.md)."""
PLACE_REACH = (0.30, 0.70)
"""Where the expert sets a block down beside another: x at least the first (m), and at most
the second from the arm's base horizontally (top-down grasps stay comfortable there)."""
PLACE_CLEARANCE = 0.08
"""... with its centre this far (m) from every other block's centre (room for the open fingers)."""
BOX_MARGIN = 0.045
"""... and its centre this far (m) outside the box's outer walls."""


def in_relation_zone(named_xy, reference_xy, relation: str) -> bool:
    """Whether a block at named_xy is `relation` of a block at reference_xy (RELATION_RANGE,
    RELATION_HALF_ANGLE around RELATION_DIRECTIONS[relation])."""
    d = np.asarray(named_xy, dtype=float)[:2] - np.asarray(reference_xy, dtype=float)[:2]
    dist = float(np.hypot(d[0], d[1]))
    lo, hi = RELATION_RANGE
    if not lo <= dist <= hi:
        return False
    u = np.asarray(RELATION_DIRECTIONS[relation])
    along, across = float(np.dot(d, u)), float(abs(d[0] * u[1] - d[1] * u[0]))
    # Strictly within the half-angle (along > across * cot): the four sectors never share a point.
    return along > across / math.tan(RELATION_HALF_ANGLE)


def spot_clearance(cand: np.ndarray, obstacles: list[np.ndarray], box: np.ndarray, box_outer: float) -> float | None:
    """The distance from a candidate spot (x, y) to the nearest obstacle (1 m when there is
    none), or None when the spot is within BOX_MARGIN of the box or PLACE_CLEARANCE of an
    obstacle: the rule every place on the table keeps (relation_spot, expert.set_down_spot)."""
    if np.all(np.abs(cand - box) < box_outer / 2 + BOX_MARGIN):
        return None
    clearance = min((float(np.linalg.norm(cand - o)) for o in obstacles), default=1.0)
    return None if clearance < PLACE_CLEARANCE else clearance


def relation_spot(reference_xy, relation: str, obstacles_xy, box_center, box_outer: float) -> np.ndarray | None:
    """Where to set a block down `relation` of a block at reference_xy: the candidate (6-10 cm
    away, up to 30 degrees off the relation's direction) farthest from the obstacles (other
    blocks' centres), among those inside PLACE_REACH, PLACE_CLEARANCE from every obstacle and
    BOX_MARGIN outside the box; None when no candidate qualifies."""
    ref = np.asarray(reference_xy, dtype=float)[:2]
    base = math.atan2(RELATION_DIRECTIONS[relation][1], RELATION_DIRECTIONS[relation][0])
    obstacles = [np.asarray(o, dtype=float)[:2] for o in obstacles_xy]
    box = np.asarray(box_center, dtype=float)[:2]
    best, best_score = None, -math.inf
    for dist in (0.08, 0.07, 0.09, 0.06, 0.10):
        for off in (0.0, 15.0, -15.0, 30.0, -30.0):
            angle = base + math.radians(off)
            cand = ref + dist * np.array([math.cos(angle), math.sin(angle)])
            if cand[0] < PLACE_REACH[0] or float(np.hypot(cand[0], cand[1])) > PLACE_REACH[1]:
                continue
            clearance = spot_clearance(cand, obstacles, box, box_outer)
            if clearance is None:
                continue
            # Prefer the nominal spot; move off it only for room.
            score = min(clearance, 0.15) - 0.1 * abs(dist - 0.08) - 0.0005 * abs(off)
            if score > best_score:
                best, best_score = cand, score
    return best


def draw_goal(task: str, episode_seed: int, colours: list[str], xy: np.ndarray, target: str,
              cfg: SimConfig) -> Goal:
    """The episode's goal for a task selector (box | stack | relation | mix). The box task is
    the layout's named block into the box and draws nothing more; the others draw from
    default_rng([episode_seed, TASK_STREAM]), a stream of their own, so the layout drawn from
    the episode seed is the same for every task. mix draws the family first; the named block
    is always the layout's. A relation goal takes the first (reference, relation) in drawn
    order that the layout does not already satisfy and for which relation_spot finds room."""
    if task not in TASKS:
        raise ValueError(f"task={task!r} must be one of {TASKS}")
    if task == "box":
        return Goal("box", target)
    rng = np.random.default_rng([int(episode_seed), TASK_STREAM])
    family = FAMILIES[int(rng.integers(len(FAMILIES)))] if task == "mix" else task
    if family == "box":
        return Goal("box", target)
    others = [c for c in colours if c != target]
    if not others:
        raise ValueError(f"the {family} task needs at least 2 blocks; the layout has {colours}")
    order = [others[i] for i in rng.permutation(len(others))]
    if family == "stack":
        return Goal("stack", target, order[0])
    relations = [RELATIONS[i] for i in rng.permutation(len(RELATIONS))]
    where = dict(zip(colours, np.asarray(xy), strict=True))
    outer = cfg.box_inner_size + 2 * BOX_WALL
    for reference in order:
        obstacles = [where[c] for c in colours if c not in (target, reference)]
        for relation in relations:
            if in_relation_zone(where[target], where[reference], relation):
                continue  # already done at the start: no task
            if relation_spot(where[reference], relation, obstacles, cfg.box_center, outer) is not None:
                return Goal("relation", target, reference, relation)
    # No room anywhere: the first goal not yet done (one relation at most is, per reference).
    relation = next(r for r in relations if not in_relation_zone(where[target], where[order[0]], r))
    return Goal("relation", target, order[0], relation)


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
        self.goal: Goal | None = None
        self._instruction: str | None = None

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

    def reset(self, rng: np.random.Generator, n_blocks: int, crowd=None, goal_for=None) -> None:
        """Sample and create the blocks (the world was emptied and table/box re-made).

        crowd(colours, xy, target) -> [(key, colour, xy, yaw)]: more blocks beyond the
        sampled layout (sim.perturb's crowded world); keys name them, colours may repeat
        (never the named one). Without it, keys are the colours.
        goal_for(colours, xy, target) -> (Goal, instruction): the episode's goal and its
        words; without it, the named block into the box in the canonical words."""
        colours, xy, yaws, target = sample_layout(rng, self.cfg, n_blocks)
        goal, text = (Goal("box", target), None) if goal_for is None else goal_for(colours, xy, target)
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
        self.goal = goal
        self.target_colour = goal.colour
        self._instruction = text

    def set_goal(self, goal: Goal, text: str | None = None) -> None:
        """Replace the episode's goal (a new instruction while it runs): status() judges the
        new goal from the next call on. `text`: the words that asked for it (None: the
        goal's canonical words). Every colour the goal names must be a block on the table."""
        missing = [c for c in goal.colours if c not in self.blocks]
        if missing:
            raise ValueError(f"goal {goal} names no block on the table: {', '.join(missing)} "
                             f"(blocks {', '.join(self.blocks)})")
        self.goal = goal
        self.target_colour = goal.colour
        self._instruction = text

    @property
    def instruction(self) -> str:
        """The episode's instruction: the goal's canonical words unless other words were given."""
        return self._instruction if self._instruction is not None else self.goal.instruction

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

    def on_table(self, colour: str) -> bool:
        """Block resting level on the table: centre within ON_TABLE_Z of half its size up."""
        pos, _ = self._backend.base_pose(self.blocks[colour])
        return bool(abs(pos[2] - self.cfg.block_size / 2) <= ON_TABLE_Z)

    def stacked(self, colour: str, reference: str) -> bool:
        """`colour` rests on `reference`: its centre within STACK_XY_TOLERANCE of a block size
        of the reference's horizontally, a block size (+-25%) above it; the reference on the table."""
        s = self.cfg.block_size
        top, _ = self._backend.base_pose(self.blocks[colour])
        bottom, _ = self._backend.base_pose(self.blocks[reference])
        horizontal = float(np.hypot(top[0] - bottom[0], top[1] - bottom[1]))
        return (horizontal <= STACK_XY_TOLERANCE * s and 0.75 * s <= top[2] - bottom[2] <= 1.25 * s
                and self.on_table(reference))

    def beside(self, colour: str, reference: str, relation: str) -> bool:
        """Both blocks on the table and `colour` in the relation's zone of `reference`."""
        pos, _ = self._backend.base_pose(self.blocks[colour])
        ref, _ = self._backend.base_pose(self.blocks[reference])
        return self.on_table(colour) and self.on_table(reference) and in_relation_zone(pos, ref, relation)

    def _resting(self, colour: str) -> bool:
        lin, _ = self._backend.base_velocity(self.blocks[colour])
        return bool(np.linalg.norm(lin) < RESTING_SPEED)

    def status(self, gripper_opening: float) -> str:
        """"success" | "failure" | "running" from physics state (time limit is the env's).

        Any family: a block off the table fails, and so does a block in the box that the
        goal does not put there. Success needs the gripper open and the named block resting
        where the goal wants it: in the box, on the reference block, or in the reference's
        relation zone (docs/tasks.md)."""
        goal = self.goal
        box_goal = goal is None or goal.family == "box"
        for colour in self.blocks:
            if self.fell_off(colour):
                return "failure"
            if (colour != self.target_colour or not box_goal) and self.in_box(colour):
                return "failure"
        target = self.target_colour
        if not target or gripper_opening <= OPEN_GRIPPER:
            return "running"
        if box_goal:
            if self.in_box(target) and self._resting(target):
                return "success"
        elif goal.family == "stack":
            if self.stacked(target, goal.reference) and self._resting(target) and self._resting(goal.reference):
                return "success"
        elif self.beside(target, goal.reference, goal.relation) and self._resting(target):
            return "success"
        return "running"
