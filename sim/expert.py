"""Scripted pick-and-place expert: typed waypoints, min-jerk Cartesian motion, IK per tick.

The expert runs from published data alone (instruction, joint positions, object poses): it
owns a private PyBullet DIRECT client with only the Panda loaded, for forward and inverse
kinematics. Each waypoint is a target pose of the grasp point (panda_grasptarget, between
the fingertips) with a yaw, a gripper opening, a duration and a tolerance. Between
waypoints the grasp point follows a minimum-jerk profile (Flash & Hogan 1985) in Cartesian
space and IK turns each 50 Hz sample into 7 joint targets, seeded from the previous
solution so consecutive solutions stay on one branch. Grasps are top-down with the fingers
closing across two faces of the block (yaw aligned to the block, modulo 90 degrees).

Goals (sim.instructions): the instruction is parsed into a Goal, and the place part of the
plan goes where the goal says: into the box; onto the reference block (the hand turned so
the held block's faces line up with the reference's, released just above it); or beside the
reference (sim.task.relation_spot: in the relation's zone with room for the fingers; the
hand turned so the fingers close across the line to the reference, set down just above the
table and released with the fingers opened only a little past the block, clear of the
neighbours). Both turn the hand to a yaw near the wrist's neutral at the place
(_wrist_neutral), so joint 7 stays clear of its limits. ABOVE_BOX and LOWER name the moves
above and down to that place whatever it is.

Recovery: a missed grasp (fingers closed on nothing) or a block dropped on the way re-plans
from ABOVE_BLOCK with the block's latest pose. With ExpertConfig.perturb_prob > 0 the
expert now and then injects a joint-space offset or a pause and then re-plans from the
measured pose: demonstrations of recovering from off-nominal states.

Taking over mid-task: reset() plans from the state it is given, so it can take over from
another agent (DAgger-style relabelling, `arm-act collect --policy`). With the named block
already between the fingers the plan is the place part only; with open fingers at the
block's grasp pose (NEAR_GRASP_XY, NEAR_GRASP_Z) it moves straight there and grasps, so
the recorded part corrects the other agent's aim instead of starting the approach again.

A new goal mid-episode: retarget() re-plans from the current state the same way. With the
new goal's block in hand it carries it to the new place; with another block in hand (the
old goal's, say) it first sets that one down on the table (set_down_spot: clear of the
other blocks, the box and the new goal's place) and then picks the named block.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
import weakref
from dataclasses import dataclass, field

import numpy as np

from arm_act.sim.backend import Backend, quat_from_yaw, quat_multiply, quat_to_matrix, yaw_of
from arm_act.sim.instructions import Goal, parse_goal
from arm_act.sim.robot import GRIPPER_MAX, HOME, Panda
from arm_act.sim.task import (
    BOX_WALL,
    PLACE_REACH,
    ObjectState,
    in_relation_zone,
    relation_spot,
    spot_clearance,
)

logger = logging.getLogger(__name__)

TOP_DOWN = np.array([1.0, 0.0, 0.0, 0.0])
"""Quaternion (xyzw) of a rotation by pi about x: the hand's z axis (the gripper) points
down. Composed with a yaw about world z; at yaw 0 the fingers close along world y."""
_PERTURBABLE = frozenset({"above_block", "descend", "lift", "above_box", "lower"})
NEAR_GRASP_XY = 0.04
NEAR_GRASP_Z = (0.01, 0.03)
NEAR_GRASP_OPENING = 0.028
"""m: an expert taking over with the fingers open wider than NEAR_GRASP_OPENING each (the
largest block, 4.8 cm, stops them at 2.4 cm: they hold nothing) this close to the named
block's grasp pose (horizontally; below, above) moves straight to it and grasps
(ScriptedExpert._plan_from)."""
TABLE_RELEASE_CLEARANCE = 0.005
"""m: gap under the held block when it is released onto another block or beside one."""
BESIDE_RELEASE_OPENING = 0.036
"""m per finger: the opening at a release beside another block (the gripper counts as
open above 0.03): the fingers stay clear of the neighbours."""
PERTURBATION_SEED_OFFSET = 1_000_003  # away from the episode seed itself, which draws the scene (sim.env)


def perturbation_rng(episode_seed: int) -> np.random.Generator:
    """The expert's perturbation generator in the episode with this seed. In process
    (run_expert_episodes, `arm-act collect`, `arm-act eval --policy expert`) and over ROS
    (expert_node, from the episode message's seed) alike, so a perturbed expert episode
    depends on its seed only and is the same both ways."""
    return np.random.default_rng(int(episode_seed) + PERTURBATION_SEED_OFFSET)


class WaypointKind(enum.Enum):
    ABOVE_BLOCK = "above_block"
    DESCEND = "descend"
    GRASP = "grasp"
    LIFT = "lift"
    ABOVE_BOX = "above_box"
    LOWER = "lower"
    RELEASE = "release"
    RETREAT = "retreat"


@dataclass(frozen=True)
class Waypoint:
    """Target of one motion segment: grasp-point position (3,) m, hand yaw (rad; NaN keeps
    the yaw the segment starts with), gripper opening (m per finger). The segment lasts
    `duration` s (min-jerk; 0 means "from the distance at the start"), then holds until the
    measured grasp point is within `tolerance` m of `position` (None: no check), at most
    `max_wait` s more."""

    kind: WaypointKind
    position: np.ndarray
    yaw: float
    gripper: float
    duration: float
    tolerance: float | None = 0.01
    max_wait: float = 1.0
    carried: str | None = None
    """The object name of the block this segment carries when it is not the named block
    (setting another block down before a new goal's pick); None: the named block."""


@dataclass(frozen=True)
class ExpertConfig:
    """Scripted expert parameters (metres, seconds, radians)."""

    speed: float = 0.35
    """Average Cartesian speed of a segment (peak is 1.875x for min-jerk)."""
    min_duration: float = 0.5
    approach_height: float = 0.13
    """Grasp-point height above the block centre before descending."""
    carry_height: float = 0.20
    """Grasp-point height while carrying (block bottom well above the 6 cm box rim)."""
    grasp_depth: float = 0.0
    """Grasp point relative to the block centre (fingertips are ~7 mm below it)."""
    release_clearance: float = 0.015
    """Gap between block bottom and box floor at release."""
    grasp_time: float = 0.5
    release_time: float = 0.4
    retreat_height: float = 0.22
    max_retries: int = 4
    ik_iterations: int = 3
    perturb_prob: float = 0.0
    """Probability, at the start of each waypoint, of a perturbation (offset or pause)."""
    perturb_joint_std: float = 0.08
    perturb_duration: tuple[float, float] = (0.3, 0.8)

    def __post_init__(self) -> None:
        if self.speed <= 0 or self.min_duration <= 0:
            raise ValueError(f"speed={self.speed} and min_duration={self.min_duration} must be > 0")
        if not 0.0 <= self.perturb_prob <= 1.0:
            raise ValueError(f"perturb_prob={self.perturb_prob} must be in [0, 1]")
        lo, hi = self.perturb_duration
        if not 0 < lo <= hi:
            raise ValueError(f"perturb_duration={self.perturb_duration} must satisfy 0 < lo <= hi")
        if self.perturb_joint_std < 0:
            raise ValueError(f"perturb_joint_std={self.perturb_joint_std} must be >= 0")
        if self.max_retries < 0 or self.ik_iterations < 1:
            raise ValueError(f"max_retries={self.max_retries} >= 0 and "
                             f"ik_iterations={self.ik_iterations} >= 1 required")
        if self.carry_height < self.approach_height:
            raise ValueError(f"carry_height={self.carry_height} must be >= approach_height={self.approach_height}")


def min_jerk(s: float) -> float:
    """Minimum-jerk time scaling 10s^3 - 15s^4 + 6s^5 of s in [0, 1]."""
    s = min(max(s, 0.0), 1.0)
    return s * s * s * (10.0 + s * (-15.0 + 6.0 * s))


def wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi


def face_yaw(orientation: np.ndarray) -> float:
    """Yaw (rad) of a horizontal face normal of a cube resting on any face: of the cube's
    three axes, the most vertical one is skipped and the next one's heading is returned
    (a block knocked onto its side still gets a correct grasp yaw)."""
    rot = quat_to_matrix(orientation)
    vertical = int(np.argmax(np.abs(rot[2])))
    axis = rot[:, (vertical + 1) % 3]
    return float(np.arctan2(axis[1], axis[0]))


def set_down_spot(hand_xy, obstacles_xy, box_center, box_outer: float) -> np.ndarray | None:
    """Where to set a held block down on the table: on a 2 cm grid inside PLACE_REACH,
    BOX_MARGIN outside the box and PLACE_CLEARANCE from every obstacle (other blocks, the
    next place), the roomiest such spot, nearer the hand among equally roomy ones; None
    when no spot qualifies."""
    hand = np.asarray(hand_xy, dtype=float)[:2]
    obstacles = [np.asarray(o, dtype=float)[:2] for o in obstacles_xy]
    box = np.asarray(box_center, dtype=float)[:2]
    best, best_score = None, -math.inf
    for x in np.arange(PLACE_REACH[0], PLACE_REACH[1] + 1e-9, 0.02):
        for y in np.arange(-0.30, 0.30 + 1e-9, 0.02):
            cand = np.array([x, y])
            if float(np.hypot(x, y)) > PLACE_REACH[1] - 0.05:  # well inside the reach limit
                continue
            clearance = spot_clearance(cand, obstacles, box, box_outer)
            if clearance is None:
                continue
            # Room first (up to 12 cm), then a short way there.
            score = min(clearance, 0.12) - 0.2 * float(np.linalg.norm(cand - hand))
            if score > best_score:
                best, best_score = cand, score
    return best


def _wrist_neutral(position: np.ndarray) -> float:
    """The hand yaw that leaves joint 7 mid-range with the grasp point at `position`: the
    azimuth of the place seen from the base (joint 1 turns the arm towards it; joint 7 sits
    near its home angle, far from both limits, at a hand yaw equal to that azimuth). Yaws
    chosen within 90 degrees of it never drive joint 7 into a limit."""
    return math.atan2(float(position[1]), float(position[0]))


def grasp_yaw(block_yaw: float, neutral: float = 0.0) -> float:
    """Hand yaw aligned with the block's faces (cube: 90-degree symmetric), nearest `neutral`
    so the wrist (joint 7) stays far from its limits."""
    return neutral + wrap(4 * (block_yaw - neutral)) / 4


@dataclass
class _Segment:
    waypoint: Waypoint
    start_time: float
    start_pos: np.ndarray
    start_yaw: float


@dataclass
class _Perturbation:
    start_time: float
    duration: float
    offset: np.ndarray = field(default_factory=lambda: np.zeros(7))


class ScriptedExpert:
    """Waypoint expert. reset(instruction, objects, joint_position (9,)), then
    act(t, joint_position (9,), objects | None) -> (arm targets (7,), gripper opening)."""

    def __init__(self, config: ExpertConfig | None = None, rng: np.random.Generator | None = None) -> None:
        self.config = config if config is not None else ExpertConfig()
        # rng only drives the optional perturbations; without it none are injected.
        self._rng = rng
        self._backend = Backend(gui=False)
        # Close the private client even if the owner forgets close() (e.g. a node torn down).
        self._finalizer = weakref.finalize(self, self._backend.close)
        self._backend.reset_world(1.0 / 250, 10)
        self._arm = Panda(self._backend, collision_visuals=True)
        self._plan: list[Waypoint] = []
        self._segment: _Segment | None = None
        self._perturb: _Perturbation | None = None
        self._q = HOME.copy()
        self._colour = ""
        self._goal: Goal | None = None
        self._objects: dict[str, ObjectState] = {}
        self._place: tuple[np.ndarray, float, float] | None = None
        self._block: ObjectState | None = None
        self._box: ObjectState | None = None
        self._retries = 0
        self._gripper = GRIPPER_MAX
        self.done = False

    def close(self) -> None:
        """Release the private IK client; idempotent."""
        self._finalizer()

    # --- kinematics --------------------------------------------------------------------
    def _fk(self, q: np.ndarray) -> tuple[np.ndarray, float]:
        """Grasp-point position (3,) and hand yaw for joint positions (9,)."""
        self._backend.reset_joints(self._arm.body, self._arm.joint_ids, q)
        pos, orn = self._backend.link_pose(self._arm.body, self._arm.grasp_link)
        # The hand points down: its yaw is the world-z rotation of orn * TOP_DOWN^-1.
        return pos, yaw_of(quat_multiply(orn, TOP_DOWN))

    def _ik(self, pos: np.ndarray, yaw: float) -> np.ndarray:
        """Arm joints (7,) reaching grasp pose (pos, yaw), seeded from the last solution."""
        arm, b = self._arm, self._backend
        orn = quat_multiply(quat_from_yaw(yaw), TOP_DOWN)
        q = self._q.copy()
        for _ in range(self.config.ik_iterations):
            b.reset_joints(arm.body, arm.joint_ids, q)
            sol = b.inverse_kinematics(arm.body, arm.grasp_link, pos, orn, arm.lower, arm.upper, HOME)
            q[:7] = np.clip(sol[:7], arm.lower[:7], arm.upper[:7])
        self._q = q
        return q[:7].copy()

    # --- planning ----------------------------------------------------------------------
    def reset(self, instruction: str, objects: list[ObjectState], joint_position: np.ndarray) -> None:
        self._reset(instruction, objects, joint_position, set_down_other=False)

    def retarget(self, instruction: str, objects: list[ObjectState], joint_position: np.ndarray) -> None:
        """A new instruction while the episode runs: plan again from the current state. The
        named block in hand is carried to the new place; another block in hand is set down
        on the table first (set_down_spot), then the named block is picked. The perturbation
        generator carries on; the retry count starts again. Raises ValueError as reset does."""
        self._reset(instruction, objects, joint_position, set_down_other=True)

    def _reset(self, instruction: str, objects: list[ObjectState], joint_position: np.ndarray,
               set_down_other: bool) -> None:
        goal = parse_goal(instruction)
        if not isinstance(goal, Goal):
            raise ValueError(f"instruction {instruction!r} refused: {goal.reason}")
        self._goal, self._colour = goal, goal.colour
        self._block = self._box = None
        self._objects = {}
        self._update_objects(objects)
        needed = [f"block_{c}" for c in goal.colours]
        if self._block is None or self._box is None or any(n not in self._objects for n in needed):
            raise ValueError(f"objects {[o.name for o in objects]} lack {' or '.join(needed)} or the box")
        self._q = np.asarray(joint_position, dtype=np.float64).copy()
        self._retries = 0
        self._perturb = None
        self._gripper = float(np.mean(joint_position[7:9]))
        self.done = False
        self._plan = self._plan_from(self._q, set_down_other)
        self._segment = None

    def _plan_from(self, q: np.ndarray, set_down_other: bool = False) -> list[Waypoint]:
        """The plan from joint positions q (9,): pick and place, or only the place part when
        the named block is already between the fingers (taking over from another agent
        mid-task), without ABOVE_BOX when the hand is already over the box below carry height.
        set_down_other: with another block between the fingers, set it down first."""
        assert self._block is not None and self._box is not None
        grasp_point, _ = self._fk(q)
        fingers = float(np.mean(q[7:9]))
        if set_down_other:
            other = self._other_in_hand(grasp_point, fingers)
            if other is not None:
                place = self._place_plan()
                set_down = self._set_down_plan(other, grasp_point, place[1].position)
                logger.debug("expert: new goal with %s in hand, setting it down first", other.name)
                return set_down + self._pick_plan() + place
        if self._at_the_block(grasp_point, fingers):
            # Taking over at a grasp the other agent was starting to close: straight to the
            # grasp pose from here (a correction of its aim), not back up to ABOVE_BLOCK.
            pick = self._pick_plan()
            pick = [dataclasses.replace(pick[1], duration=0.0), *pick[2:]]
            logger.debug("expert: taking over at the block, plan %s", [w.kind.value for w in pick])
            return pick + self._place_plan()
        in_hand = (0.006 < fingers < GRIPPER_MAX - 0.005
                   and float(np.linalg.norm(self._block.position - grasp_point)) < 0.03)
        if not in_hand:
            return self._pick_plan() + self._place_plan()
        place = self._place_plan()
        over_box = float(np.linalg.norm(grasp_point[:2] - place[0].position[:2])) < 0.02
        if over_box and grasp_point[2] < self.config.carry_height + 0.02:
            place = place[1:]
        logger.debug("expert: taking over with the block in hand, plan %s", [w.kind.value for w in place])
        return place

    def _other_in_hand(self, grasp_point: np.ndarray, fingers: float) -> ObjectState | None:
        """The block between the fingers (closed on something, its centre within 3 cm of
        the grasp point) when it is not the named block; else None."""
        if not 0.006 < fingers < GRIPPER_MAX - 0.005:
            return None
        near = [(float(np.linalg.norm(o.position - grasp_point)), name) for name, o in self._objects.items()]
        near = [(d, name) for d, name in near if d < 0.03]
        if not near:
            return None
        _, name = min(near)
        return None if name == f"block_{self._colour}" else self._objects[name]

    def _set_down_plan(self, held: ObjectState, grasp_point: np.ndarray, next_place: np.ndarray) -> list[Waypoint]:
        """Carry `held` (not the named block) to a free spot on the table, set it down, let
        go and rise: ABOVE_BOX, LOWER, RELEASE, RETREAT with the block named in `carried`."""
        c, box = self.config, self._box
        assert box is not None
        obstacles = [o.position for name, o in self._objects.items() if name != held.name]
        obstacles.append(next_place)  # keep the new goal's place clear
        spot = set_down_spot(grasp_point, obstacles, box.position, float(box.size[0]))
        if spot is None:  # no roomy spot: straight down where the hand is, away from the box
            spot = np.asarray(grasp_point[:2], dtype=float)
        size = float(held.size[2])
        low = np.array([spot[0], spot[1], size / 2 + TABLE_RELEASE_CLEARANCE + c.grasp_depth])
        above = np.array([low[0], low[1], c.carry_height])
        retreat = np.array([low[0], low[1], c.retreat_height])
        K = WaypointKind
        return [
            Waypoint(K.ABOVE_BOX, above, math.nan, 0.0, 0.0, tolerance=0.02, carried=held.name),
            Waypoint(K.LOWER, low, math.nan, 0.0, self._duration(above, low), tolerance=0.01, carried=held.name),
            Waypoint(K.RELEASE, low, math.nan, BESIDE_RELEASE_OPENING, c.release_time, tolerance=None),
            Waypoint(K.RETREAT, retreat, math.nan, GRIPPER_MAX, self._duration(low, retreat), tolerance=None),
        ]

    def _at_the_block(self, grasp_point: np.ndarray, fingers: float) -> bool:
        """Fingers open wider than any block around the named block's grasp pose (at most
        starting to close: NEAR_GRASP_OPENING), within NEAR_GRASP_XY of it horizontally and
        NEAR_GRASP_Z (below, above) of its height."""
        assert self._block is not None
        grasp = self._block.position + np.array([0.0, 0.0, self.config.grasp_depth])
        below, above = NEAR_GRASP_Z
        return bool(fingers > NEAR_GRASP_OPENING
                    and float(np.linalg.norm(grasp_point[:2] - grasp[:2])) < NEAR_GRASP_XY
                    and -below < float(grasp_point[2] - grasp[2]) < above)

    def _update_objects(self, objects: list[ObjectState] | None) -> None:
        for obj in objects or ():
            if obj.kind == "box":
                self._box = obj
            else:
                self._objects[obj.name] = obj
                if obj.name == f"block_{self._colour}":
                    self._block = obj

    def _duration(self, a: np.ndarray, b: np.ndarray) -> float:
        return max(self.config.min_duration, float(np.linalg.norm(b - a)) / self.config.speed)

    def _pick_plan(self) -> list[Waypoint]:
        """ABOVE_BLOCK, DESCEND, GRASP, LIFT for the block's latest pose (durations of the
        first segment are fixed when it starts, from the actual start pose)."""
        c, blk = self.config, self._block
        assert blk is not None
        yaw = grasp_yaw(face_yaw(blk.orientation))
        grasp = blk.position + np.array([0.0, 0.0, c.grasp_depth])
        above = grasp + np.array([0.0, 0.0, c.approach_height])
        lift = np.array([grasp[0], grasp[1], c.carry_height])
        K = WaypointKind
        return [
            Waypoint(K.ABOVE_BLOCK, above, yaw, GRIPPER_MAX, 0.0, tolerance=0.01),
            Waypoint(K.DESCEND, grasp, yaw, GRIPPER_MAX, self._duration(above, grasp), tolerance=0.006),
            Waypoint(K.GRASP, grasp, yaw, 0.0, c.grasp_time, tolerance=None),
            Waypoint(K.LIFT, lift, yaw, 0.0, self._duration(grasp, lift), tolerance=0.02),
        ]

    @property
    def goal(self) -> Goal | None:
        """The goal parsed from the instruction at reset."""
        return self._goal

    def _reference(self) -> ObjectState:
        assert self._goal is not None and self._goal.reference is not None
        return self._objects[f"block_{self._goal.reference}"]

    def _place_target(self) -> tuple[np.ndarray, float, float]:
        """Where the goal puts the held block: grasp-point position (3,) at release, hand yaw
        there (NaN: keep the carrying yaw) and the release opening (m per finger)."""
        c, box, blk, goal = self.config, self._box, self._block, self._goal
        assert box is not None and blk is not None and goal is not None
        size = float(blk.size[2])
        if goal.family == "box":
            # Grasp point at the held block's centre: block bottom release_clearance above the floor.
            low = np.array([box.position[0], box.position[1],
                            box.position[2] + BOX_WALL + c.release_clearance + size / 2 + c.grasp_depth])
            return low, math.nan, GRIPPER_MAX
        ref = self._reference()
        if goal.family == "stack":
            top = ref.position[2] + float(ref.size[2]) / 2
            low = np.array([ref.position[0], ref.position[1], top + TABLE_RELEASE_CLEARANCE + size / 2 + c.grasp_depth])
            # Faces in line with the reference's, the yaw within 45 degrees of the wrist's neutral there.
            return low, grasp_yaw(face_yaw(ref.orientation), neutral=_wrist_neutral(low)), GRIPPER_MAX
        others = [o.position for name, o in self._objects.items()
                  if name not in (f"block_{goal.colour}", f"block_{goal.reference}")]
        spot = relation_spot(ref.position, goal.relation, others, box.position, float(box.size[0]))
        if spot is None:  # no roomy spot: the nominal one
            from arm_act.sim.task import RELATION_DIRECTIONS

            spot = ref.position[:2] + 0.08 * np.asarray(RELATION_DIRECTIONS[goal.relation])
        low = np.array([spot[0], spot[1], size / 2 + TABLE_RELEASE_CLEARANCE + c.grasp_depth])
        # Fingers closing across the line from the reference to the spot, never towards it
        # (at yaw psi they close along (-sin psi, cos psi)); of the two such yaws, the one
        # within 90 degrees of the wrist's neutral there.
        away = spot - ref.position[:2]
        across = math.atan2(away[1], away[0])
        neutral = _wrist_neutral(low)
        return low, neutral + wrap(2 * (across - neutral)) / 2, BESIDE_RELEASE_OPENING

    def _place_plan(self) -> list[Waypoint]:
        c = self.config
        assert self._box is not None and self._block is not None
        low, yaw, opening = self._place_target()
        self._place = (low, yaw, opening)
        above = np.array([low[0], low[1], c.carry_height])
        retreat = np.array([low[0], low[1], c.retreat_height])
        K = WaypointKind
        return [
            Waypoint(K.ABOVE_BOX, above, yaw, 0.0, 0.0, tolerance=0.02),
            Waypoint(K.LOWER, low, math.nan, 0.0, self._duration(above, low), tolerance=0.01),
            Waypoint(K.RELEASE, low, math.nan, opening, c.release_time, tolerance=None),
            Waypoint(K.RETREAT, retreat, math.nan, opening, self._duration(low, retreat),
                     tolerance=None),
        ]

    @property
    def waypoint(self) -> Waypoint | None:
        """The waypoint being executed (None before the first act; the last one when done)."""
        return None if self._segment is None else self._segment.waypoint

    def _start_segment(self, t: float, joint_position: np.ndarray, from_measured: bool) -> None:
        wp = self._plan.pop(0)
        if wp.kind is WaypointKind.ABOVE_BLOCK:
            # Targets from the block's pose now, not when planned: it may have been nudged.
            fresh = self._pick_plan()
            wp, self._plan[:3] = fresh[0], fresh[1:]
        if from_measured or self._segment is None:
            pos, yaw = self._fk(joint_position)
            self._q[:7] = joint_position[:7]
        else:  # continue from the previous target: no jump from tracking lag
            pos, yaw = self._segment.waypoint.position.copy(), self._segment.waypoint.yaw
        if math.isnan(wp.yaw):  # keep the current yaw (carrying, releasing, retreating)
            wp = dataclasses.replace(wp, yaw=yaw)
        if wp.duration == 0.0:  # free-space moves: duration from the actual distance
            wp = dataclasses.replace(wp, duration=self._duration(pos, wp.position))
        self._segment = _Segment(wp, t, pos, yaw)
        self._maybe_perturb(t)

    def _maybe_perturb(self, t: float) -> None:
        c = self.config
        if self._rng is None or c.perturb_prob <= 0:
            return
        if self._segment is None or self._segment.waypoint.kind.value not in _PERTURBABLE:
            return
        if self._rng.random() >= c.perturb_prob:
            return
        duration = float(self._rng.uniform(*c.perturb_duration))
        offset = np.zeros(7)
        if self._rng.random() < 0.5:  # joint-space offset; otherwise a pause
            offset = self._rng.normal(0.0, c.perturb_joint_std, size=7)
        self._perturb = _Perturbation(t, duration, offset)

    # --- acting ------------------------------------------------------------------------
    def act(self, t: float, joint_position: np.ndarray, objects: list[ObjectState] | None = None
            ) -> tuple[np.ndarray, float]:
        """Arm joint targets (7,) and gripper opening (m) for time t (s since reset)."""
        q_meas = np.asarray(joint_position, dtype=np.float64)
        if q_meas.shape != (9,):
            raise ValueError(f"joint_position has shape {q_meas.shape}, expected (9,)")
        self._update_objects(objects)
        if self._perturb is not None:
            return self._act_perturbed(t, q_meas)
        if self._segment is None:
            self._start_segment(t, q_meas, from_measured=True)
            if self._perturb is not None:
                return self._act_perturbed(t, q_meas)
        seg = self._segment
        assert seg is not None
        if self._segment_finished(t, q_meas):
            self._on_segment_end(t, q_meas, objects)
            seg = self._segment
            assert seg is not None
            if self._perturb is not None:
                return self._act_perturbed(t, q_meas)
        wp = seg.waypoint
        a = min_jerk((t - seg.start_time) / wp.duration)
        pos = seg.start_pos + a * (wp.position - seg.start_pos)
        yaw = seg.start_yaw + a * wrap(wp.yaw - seg.start_yaw)
        self._gripper = wp.gripper
        return self._ik(pos, yaw), wp.gripper

    def _act_perturbed(self, t: float, q_meas: np.ndarray) -> tuple[np.ndarray, float]:
        """During a perturbation hold still (pause) or ramp to a joint offset, gripper as last
        commanded; afterwards re-plan the interrupted segment from the measured pose."""
        pert, seg = self._perturb, self._segment
        assert pert is not None and seg is not None
        if t - pert.start_time < pert.duration:
            a = min_jerk((t - pert.start_time) / (0.5 * pert.duration))
            arm = np.clip(self._q[:7] + a * pert.offset, self._arm.lower[:7], self._arm.upper[:7])
            return arm, self._gripper
        self._perturb = None
        self._plan.insert(0, seg.waypoint)
        rng, self._rng = self._rng, None  # no perturbation right after one
        self._start_segment(t, q_meas, from_measured=True)
        self._rng = rng
        return self.act(t, q_meas)

    def _segment_finished(self, t: float, q_meas: np.ndarray) -> bool:
        seg = self._segment
        assert seg is not None
        wp = seg.waypoint
        elapsed = t - seg.start_time
        if elapsed < wp.duration:
            return False
        if wp.tolerance is None or elapsed >= wp.duration + wp.max_wait:
            return True
        pos, _ = self._fk(q_meas)
        return float(np.linalg.norm(pos - wp.position)) <= wp.tolerance

    def _holding(self, q_meas: np.ndarray) -> bool:
        """Fingers stopped by a block (a 4 cm block leaves each finger at ~0.02 m)."""
        return float(q_meas[7:].mean()) > 0.006

    def _on_segment_end(self, t: float, q_meas: np.ndarray, objects: list[ObjectState] | None) -> None:
        waypoint = self._segment.waypoint  # type: ignore[union-attr]
        kind = waypoint.kind
        K = WaypointKind
        carrying = kind in (K.LIFT, K.ABOVE_BOX, K.LOWER)
        in_hand = True
        carried = self._block if waypoint.carried is None else self._objects.get(waypoint.carried)
        if carrying and carried is not None and objects is not None:
            # With ground truth: the block is between the fingertips, not left behind.
            grasp_point, _ = self._fk(q_meas)
            in_hand = float(np.linalg.norm(carried.position - grasp_point)) < 0.03
        if carrying and not (self._holding(q_meas) and in_hand):
            self._replan(t, q_meas, f"grasp lost after {kind.value}")
            return
        if not self._plan:
            if self._block is not None and objects is not None and not self._goal_reached():
                self._replan(t, q_meas, f"block not where the {self._goal.family} goal wants it after release")
                return
            self.done = True
            self._plan = [self._segment.waypoint]  # type: ignore[union-attr]  # hold the last pose
        self._start_segment(t, q_meas, from_measured=False)

    def _goal_reached(self) -> bool:
        """From the latest object poses: the named block where the goal wants it."""
        goal = self._goal
        if goal is None or goal.family == "box":
            return self._in_box()
        blk, ref = self._block, self._reference()
        assert blk is not None
        if goal.family == "stack":
            size = float(ref.size[2])
            return bool(float(np.linalg.norm(blk.position[:2] - ref.position[:2])) <= 0.5 * size
                        and blk.position[2] - ref.position[2] > 0.5 * size)
        return in_relation_zone(blk.position, ref.position, goal.relation)

    def _in_box(self) -> bool:
        blk, box = self._block, self._box
        assert blk is not None and box is not None
        half = (box.size[0] - 2 * BOX_WALL) / 2
        return bool(np.all(np.abs(blk.position[:2] - box.position[:2]) <= half))

    def _replan(self, t: float, q_meas: np.ndarray, reason: str) -> None:
        self._retries += 1
        if self._retries > self.config.max_retries:
            logger.info("expert: %s; no retries left, holding", reason)
            self._plan = [self._segment.waypoint]  # type: ignore[union-attr]
            self.done = True
        else:
            logger.info("expert: %s; re-planning (retry %d)", reason, self._retries)
            pos, _ = self._fk(q_meas)
            up = Waypoint(WaypointKind.RETREAT, np.array([pos[0], pos[1], max(pos[2], self.config.carry_height)]),
                          math.nan, GRIPPER_MAX, 0.0, tolerance=None)
            self._plan = [up] + self._pick_plan() + self._place_plan()
        self._start_segment(t, q_meas, from_measured=True)
