"""`ArmEnv`: the Panda pick-and-place world, the heart of arm_act.sim's API.

Layering: backend (pybullet) -> robot / task / cameras -> this env. Each env
owns one BulletClient, so several envs can live in one process. Every reset empties and
rebuilds the world and draws everything from np.random.default_rng(seed): the same seed and
the same commands give bit-identical joint states and images.
"""

from __future__ import annotations

import dataclasses
import functools
import logging

import numpy as np

from arm_act.sim import perturb
from arm_act.sim.backend import Backend
from arm_act.sim.camera import Camera, intrinsics
from arm_act.sim.config import SimConfig
from arm_act.sim.goal_change import GoalChange
from arm_act.sim.instructions import PHRASINGS, TASKS, Goal, Refusal, parse_goal, phrase
from arm_act.sim.robot import GRIPPER_MAX, HOME, JointStateArrays, Panda
from arm_act.sim.task import OPEN_GRIPPER, ObjectState, PickPlaceTask, draw_goal

logger = logging.getLogger(__name__)

LIFTED_AT_CHANGE = 0.04
"""m: a block whose centre is this high at a scheduled goal change is off the table, in the gripper
(blocks rest at 0.02; the first goal is the box, so no block rests on another)."""
STATUSES = ("running", "success", "failure", "timeout")  # what status() returns; episode messages carry them


class ArmEnv:
    """Franka Panda, table, open box and 2-6 coloured blocks; two cameras by default.

    perturbation: one of sim.perturb's configs (push, lighting, camera, distractors, size,
    crowded), drawn per episode from the episode seed at every reset and applied at reset and
    during the episode; None (the default) leaves every episode exactly as without it.

    task: box | stack | relation | mix, the family of every episode's goal (mix: drawn per
    episode), drawn by sim.task.draw_goal from a stream of its own so the layout is the same
    for every task; box (the default) is the task as it always was. instruction: the same
    words for every episode instead; reset parses them against the episode's blocks and
    raises ValueError when they do not fit (sim.instructions.parse_goal's reason).

    goal_change: a sim.goal_change.GoalChange: at its time in every episode the env changes
    the goal itself, as a new instruction on sim_node's `task` topic does (change_goal);
    None (the default) never changes it."""

    def __init__(self, config: SimConfig | None = None, gui: bool = False,
                 perturbation: perturb.Perturbation | None = None, task: str = "box",
                 instruction: str | None = None, phrasing: str = "canonical",
                 goal_change: GoalChange | None = None) -> None:
        self.config = config if config is not None else SimConfig()
        self.perturbation = perturbation
        if task not in TASKS:
            raise ValueError(f"task={task!r} must be one of {TASKS}")
        if instruction is not None:
            parsed = parse_goal(instruction)
            if not isinstance(parsed, Goal):
                raise ValueError(f"instruction {instruction!r} refused: {parsed.reason}")
        if (task != "box" or instruction is not None) and getattr(perturbation, "name", None) == "crowded":
            raise ValueError("the crowded world repeats colours; it runs the box task with its own instruction only")
        if phrasing not in PHRASINGS:
            raise ValueError(f"phrasing={phrasing!r} must be one of {', '.join(PHRASINGS)}")
        if phrasing != "canonical" and instruction is not None:
            raise ValueError("phrasing draws the words of the task's goal; a fixed instruction has its own")
        self.task, self.fixed_instruction, self.phrasing = task, instruction, phrasing
        self.goal_change = goal_change
        self.goal_change_refused: str | None = None  # why this episode's scheduled change was refused
        # The blocks lifted off the table (centre above LIFTED_AT_CHANGE) when it came due.
        self.goal_change_lifted: list[str] = []
        self._drawn: perturb.EpisodePerturbation | None = None
        self._perturb_log: dict = {}
        self._distractors: list[int] = []
        self._backend = Backend(gui=gui)
        self._robot: Panda | None = None
        self._task: PickPlaceTask | None = None
        self._cameras: dict[str, Camera] = {}
        self.seed: int | None = None
        self.n_blocks = 0
        self.tick = 0
        self._status = "running"
        self._goal_changes: list[tuple[float, str]] = []

    # --- episode -----------------------------------------------------------------------
    def reset(self, seed: int, n_blocks: int = 3) -> None:
        """Start an episode: rebuild the world and sample the layout from `seed`."""
        lo, hi = self.config.n_blocks_range
        if not lo <= n_blocks <= hi:
            raise ValueError(f"n_blocks={n_blocks} must be in [{lo}, {hi}] (SimConfig.n_blocks_range)")
        seed = int(seed)
        if seed < 0:
            raise ValueError(f"seed={seed} must be >= 0")
        rng = np.random.default_rng(seed)
        cfg = self.config
        drawn = None
        if self.perturbation is not None:
            drawn = perturb.sample_episode(self.perturbation, seed, cfg.block_region)
        self._drawn, self._perturb_log, self._distractors = drawn, {}, []
        task_cfg = cfg
        if drawn is not None and drawn.kind == "size":
            task_cfg = dataclasses.replace(cfg, block_size=cfg.block_size * drawn.block_scale)
        self._backend.reset_world(cfg.physics_dt, cfg.solver_iterations)
        self._robot = Panda(self._backend, collision_visuals=cfg.render_collision_meshes)
        self._task = PickPlaceTask(self._backend, task_cfg)
        crowd = None
        if drawn is not None and drawn.kind == "crowded":
            crowd_rng = perturb.world_perturbation_rng(seed, "crowded")
            diagonal = cfg.block_size * 2 ** 0.5

            def crowd(colours, xy, target):
                return perturb.crowd_extra(crowd_rng, colours, xy, target, drawn.total_blocks,
                                           cfg.min_block_spacing, diagonal, cfg.block_region)
        self._task.reset(rng, n_blocks, crowd=crowd, goal_for=self._goal_for(seed))
        if drawn is not None and drawn.kind == "distractors":
            self._place_distractors(drawn)
        home = HOME.copy()
        if cfg.initial_joint_noise > 0:
            home[:7] += rng.normal(0.0, cfg.initial_joint_noise, size=7)
        self._robot.reset(home)
        robot = self._robot
        self._cameras = {}
        for cam in cfg.cameras:
            pose = None
            if cam.mount == "link":
                if cam.link not in robot.links:
                    raise ValueError(f"camera {cam.name!r}: link {cam.link!r} is not a Panda link "
                                     f"({sorted(robot.links)})")
                pose = functools.partial(self._backend.link_pose, robot.body, robot.links[cam.link])
            if drawn is not None and drawn.kind == "camera" and cam.name == self.perturbation.camera:
                if cam.mount != "fixed":
                    raise ValueError(f"camera jitter needs a fixed camera; {cam.name!r} is on a link")
                eye, target, up = perturb.jitter_camera(cam.eye, cam.target, cam.up, drawn.camera_offset,
                                                        drawn.camera_rotation)
                cam = dataclasses.replace(cam, eye=eye, target=target, up=up)
            light = drawn.light if drawn is not None and drawn.kind == "lighting" else None
            self._cameras[cam.name] = Camera(self._backend, cam, pose, light)
        self.seed, self.n_blocks, self.tick = seed, n_blocks, 0
        self._status = "running"
        self._goal_changes = []
        self._goal_change_due = self.goal_change is not None
        self.goal_change_refused = None
        self.goal_change_lifted = []
        if self._goal_change_due and self.goal_change.at <= 0:
            self._scheduled_goal_change()
        logger.debug("reset seed=%d n_blocks=%d: %s", seed, n_blocks, self.instruction)

    def _goal_for(self, seed: int):
        """The task's goal_for callback: None for the plain box task (nothing more drawn)."""
        if self.task == "box" and self.fixed_instruction is None and self.phrasing == "canonical":
            return None
        cfg, text = self.config, self.fixed_instruction

        def goal_for(colours, xy, target):
            if text is None:
                goal = draw_goal(self.task, seed, colours, xy, target, cfg)
                return goal, None if self.phrasing == "canonical" else phrase(goal, self.phrasing, seed)
            parsed = parse_goal(text, colours)
            if not isinstance(parsed, Goal):
                raise ValueError(f"instruction {text!r} does not fit episode seed {seed} "
                                 f"(blocks {', '.join(colours)}): {parsed.reason}")
            return parsed, text
        return goal_for

    def _require(self) -> tuple[Panda, PickPlaceTask]:
        if self._backend.closed:
            raise RuntimeError("env is closed")
        if self._robot is None or self._task is None:
            raise RuntimeError("call reset(seed, n_blocks) first")
        return self._robot, self._task

    @property
    def time(self) -> float:
        """Simulated seconds since reset."""
        return self.tick * self.config.control_dt

    @property
    def instruction(self) -> str:
        return self._require()[1].instruction

    @property
    def target_colour(self) -> str:
        return self._require()[1].target_colour

    @property
    def goal(self) -> Goal:
        """The episode's goal (sim.instructions.Goal)."""
        return self._require()[1].goal

    @property
    def goal_changes(self) -> list[tuple[float, str]]:
        """The goal changes of this episode so far: (sim s since reset, instruction), in order."""
        return list(self._goal_changes)

    def change_goal(self, instruction: str) -> Goal | Refusal:
        """A new instruction while the episode runs: parsed against the blocks on the table
        (sim.instructions.parse_goal); a Goal replaces the episode's goal from now on, so
        status() judges the new one, and is recorded in goal_changes with the time. The
        running instruction again (surrounding whitespace aside) changes nothing and is not
        recorded; a Refusal (the words give no goal here, or the episode has ended) leaves
        the goal as it was."""
        _, task = self._require()
        if self._status != "running":
            return Refusal(f"the episode has ended ({self._status})")
        text = str(instruction).strip() if isinstance(instruction, str) else instruction
        if text == self.instruction.strip():
            return task.goal
        parsed = parse_goal(text, sorted(set(task.block_colours.values())))
        if isinstance(parsed, Goal):
            task.set_goal(parsed, text)
            self._goal_changes.append((self.time, text))
            logger.debug("goal changed at %.3f s: %s", self.time, text)
        return parsed

    def _scheduled_goal_change(self) -> None:
        """Apply the goal_change due now (once an episode); a refusal is logged and kept."""
        self._goal_change_due = False
        _, task = self._require()
        poses = {task.block_colours[k]: self._backend.base_pose(b)[0] for k, b in task.blocks.items()}
        positions = {c: p[:2] for c, p in poses.items()}
        self.goal_change_lifted = sorted(c for c, p in poses.items() if p[2] > LIFTED_AT_CHANGE)
        text = self.goal_change.instruction(task.goal, positions, self.seed)
        result = Refusal(f"no {self.goal_change.to} goal in this layout") if text is None else self.change_goal(text)
        if not isinstance(result, Goal):
            self.goal_change_refused = result.reason
            logger.warning("seed %d: goal change %s refused: %s", self.seed, self.goal_change, result.reason)

    # --- control -----------------------------------------------------------------------
    def apply_command(self, arm: np.ndarray, gripper: float) -> None:
        """Joint-position targets: arm (7,) rad, gripper opening (m, per finger, 0..0.04).

        Raises ValueError for a wrong length or non-finite values (never applied, as
        forward_command_controller does); out-of-limit values are clamped to the limits."""
        robot, _ = self._require()
        arm_arr = np.asarray(arm, dtype=np.float64).reshape(-1)
        if arm_arr.shape != (7,):
            raise ValueError(f"arm command has {arm_arr.size} values, expected 7")
        grip = np.asarray(gripper, dtype=np.float64).reshape(-1)
        if grip.shape != (1,):
            raise ValueError(f"gripper command has {grip.size} values, expected 1")
        if not (np.all(np.isfinite(arm_arr)) and np.isfinite(grip[0])):
            raise ValueError(f"command has non-finite values: arm={arm_arr.tolist()} gripper={grip[0]}")
        robot.command(arm_arr, float(grip[0]))

    def step(self) -> None:
        """Advance one control period (physics_substeps physics steps)."""
        self._require()
        self._backend.step(self.config.physics_substeps)
        self.tick += 1
        if self._goal_change_due and self.time >= self.goal_change.at - 1e-9:
            self._scheduled_goal_change()
        if self._drawn is not None and self._drawn.kind == "push" and "push_tick" not in self._perturb_log:
            every = max(1, round(self.config.control_rate_hz / self.perturbation.check_rate_hz))
            if self.tick % every == 0:
                self._maybe_push()

    # --- perturbations (sim.perturb) ---------------------------------------------------
    def _place_distractors(self, drawn: perturb.EpisodePerturbation) -> None:
        p = self.perturbation
        taken = [o.position[:2] for o in self._task.objects() if o.kind == "block"]
        placed = []
        for spec in drawn.distractors:
            for xy in spec.candidates:
                cand = np.asarray(xy)
                if all(np.linalg.norm(cand - q) >= p.clearance for q in taken):
                    break
            else:
                continue  # no room left: fewer distractors (recorded)
            z = spec.radius if spec.shape == "sphere" else spec.height / 2
            body = self._backend.create_primitive(spec.shape, spec.radius, spec.height, (*spec.rgb, 1.0),
                                                  (cand[0], cand[1], z), mass=p.mass)
            self._distractors.append(body)
            taken.append(cand)
            placed.append([round(float(v), 4) for v in cand])
        self._perturb_log["distractors_placed"] = placed

    def _maybe_push(self) -> None:
        """The push: once, when the grasp point is first within the drawn trigger distance of
        the named block, the gripper open and the block resting on the table."""
        robot, task = self._require()
        if robot.gripper_opening() <= OPEN_GRIPPER:
            return
        named = task.blocks[task.target_colour]
        pos, orn = self._backend.base_pose(named)
        if pos[2] > task.cfg.block_size:  # not resting on the table
            return
        grasp = self.grasp_point()
        if np.linalg.norm(grasp - pos) > self._drawn.push_trigger:
            return
        others = [self._backend.base_pose(b)[0][:2] for k, b in task.blocks.items() if k != task.target_colour]
        low = grasp[2] < pos[2] + task.cfg.block_size / 2 + 0.015  # fingertips level with the block
        dest = perturb.push_destination(pos[:2], others, grasp[:2] if low else None, self._drawn,
                                        self.perturbation, self.config.block_region)
        if dest is None:
            return
        self._backend.set_base_pose(named, (dest[0], dest[1], pos[2]), orn)
        self._perturb_log.update(push_tick=self.tick, push_time=round(self.time, 3),
                                 push_from=[round(float(v), 4) for v in pos[:2]],
                                 push_to=[round(float(v), 4) for v in dest])

    def perturbation_info(self) -> dict | None:
        """What this episode's perturbation drew and did (JSON-ready), None without one."""
        if self._drawn is None:
            return None
        out = self._drawn.describe()
        if self._drawn.kind == "push":
            out["pushed"] = "push_tick" in self._perturb_log
        out.update(self._perturb_log)
        return out

    def distractor_positions(self) -> list[np.ndarray]:
        """(3,) positions of this episode's distractors (not objects: never blocks)."""
        self._require()
        return [self._backend.base_pose(b)[0] for b in self._distractors]

    # --- observation -------------------------------------------------------------------
    def joint_state(self) -> JointStateArrays:
        return self._require()[0].joint_state()

    def render(self) -> dict[str, np.ndarray]:
        """{camera name: (H, W, 3) uint8 RGB}, fresh arrays, in config order."""
        self._require()
        return {name: cam.render() for name, cam in self._cameras.items()}

    def grasp_point(self) -> np.ndarray:
        """(3,) world position of the grasp point (panda_grasptarget, between the fingertips)."""
        robot = self._require()[0]
        return np.asarray(self._backend.link_pose(robot.body, robot.grasp_link)[0], dtype=np.float64)

    def camera_intrinsics(self, name: str) -> np.ndarray:
        """K (3,3) of camera `name` (PyBullet vertical-fov projection, square pixels)."""
        return intrinsics(self.config.camera(name))  # KeyError lists the known names

    def camera(self, name: str) -> Camera:
        """The live `Camera` (pose, projection of world points); valid until the next reset."""
        self._require()
        if name not in self._cameras:
            raise KeyError(f"no camera {name!r}; cameras are {list(self._cameras)}")
        return self._cameras[name]

    def objects(self) -> list[ObjectState]:
        """Blocks (sampling order) then the box, from physics state."""
        return self._require()[1].objects()

    def gripper_opening(self) -> float:
        return self._require()[0].gripper_opening()

    def status(self) -> str:
        """"running" | "success" | "failure" | "timeout" (docs/architecture.md, "The task").

        A terminal status is sticky until the next reset."""
        robot, task = self._require()
        if self._status != "running":
            return self._status
        status = task.status(robot.gripper_opening())
        if status == "running" and self.time >= self.config.episode_time_limit - 1e-9:
            status = "timeout"
        self._status = status
        return status

    # --- test helpers ------------------------------------------------------------------
    def place_block(self, colour: str, position: np.ndarray, yaw: float = 0.0) -> None:
        """Teleport a block (constructed states in tests)."""
        self._require()[1].place_block(colour, position, yaw)

    def set_joint_positions(self, positions: np.ndarray) -> None:
        """Teleport the arm and fingers (9,) and hold them (constructed states: tests and
        the grounding frames of `arm-act train`)."""
        q = np.asarray(positions, dtype=np.float64)
        if q.shape != (9,) or not np.all(np.isfinite(q)):
            raise ValueError(f"joint positions must be 9 finite values, got {q}")
        robot, _ = self._require()
        robot.reset(q)

    def set_gripper(self, opening: float) -> None:
        """Teleport the fingers to an opening and hold it (constructed states in tests)."""
        robot, _ = self._require()
        q = robot.target
        q[7:] = np.clip(opening, 0.0, GRIPPER_MAX)
        robot.reset(q)

    def close(self) -> None:
        """Release the physics client; idempotent."""
        self._backend.close()
        self._robot, self._task, self._cameras, self._distractors = None, None, {}, []

    def __enter__(self) -> ArmEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
