"""Collection: scripted-expert (or takeover) episodes recorded as bags, one per episode.

    config = CollectConfig(out=Path("data/demos"), perturb=0.1)
    summary = collect(config, episodes=200, seed=0, blocks=(2, 5), workers=2)

Episode i has seed S+i and a block count drawn from that seed (arm_act.common.episodes, the
same schedule as sim_node and `arm-act eval`); its bag is OUT/episode_<seed>, written in
process and in lockstep by run_episode (arm_act.bags.episode), with the topics and messages
the live system publishes, stamped with sim time. The expert's perturbations come from
perturbation_rng(seed) (arm_act.sim.expert), so a run is reproducible bag for bag whatever
the worker count. Failed expert episodes are kept, marked success: "false" in custom_data.

Takeover episodes (CollectConfig.policy set): the policy drives each episode (in process,
with CollectConfig.latency_ticks) until a handover time drawn uniformly from
CollectConfig.handover by handover_time(seed); then the scripted expert takes over from that
state and finishes the task. With handover "miss" the expert takes over only when the
policy's grasp has closed on nothing (MissTakeoverAgent): its part then demonstrates the
re-grasp the policy never makes; an episode without a missed grasp demonstrates nothing.
With handover "grasp" it takes over at the tick the policy starts to close the gripper
(GraspTakeoverAgent), before the fingers move: from there the expert moves straight to the
block's grasp pose and grasps (sim.expert NEAR_GRASP_XY), so its part corrects the policy's
aim at the moment it matters.
With handover "push" (world push only) it takes over a drawn moment (PUSH_DELAY, from the
episode's seed) after the push has moved the named block (PushTakeoverAgent): its part
labels the states just after the block moved, with the gripper near where the block was,
going to the block where it now is.
Outside the plain box task (CollectConfig.task, .instruction) custom_data also holds the
episode's goal (JSON, arm_act.sim.instructions.Goal.to_dict) and family; the scripted expert
parses the instruction and follows that goal.
The whole episode is recorded; custom_data expert_from_s marks where the expert's commands
start ("none" when the episode ended first), and training uses only the frames from there on.

Each worker process holds one CollectionWorker (an env, and the policy runtime for
takeover episodes); nothing is kept in module globals, so runs in one process never share
state.

With `ray` (an address: local, auto or ray://HOST:PORT; arm_act/common/ray_pool.py) each
episode is one Ray task on whichever node has a free CPU: it records into a temporary
directory there and sends the bag's files back as bytes, which the driver writes into
config.out (no shared file system; a takeover checkpoint travels to the tasks the same
way). The same seeds give the same bags, message for message, as a local run.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arm_act.assist.aim import MISS_OPENING  # m per finger: closed this far, the fingers hold nothing
from arm_act.bags import is_complete
from arm_act.bags.episode import EpisodeBagRecorder, bag_name
from arm_act.common.episodes import EpisodeSpec, episode_spec
from arm_act.common.worker_pool import run_in_processes

logger = logging.getLogger(__name__)

COMPRESSIONS = (None, "zstd")
DEFAULT_HANDOVER = (1.0, 10.0)  # s
MISS = "miss"  # CollectConfig.handover: the expert takes over when the policy's grasp closes on nothing
GRASP = "grasp"  # CollectConfig.handover: the expert takes over as the policy starts to close the gripper
PUSH = "push"  # CollectConfig.handover: the expert takes over a moment after the push (world push)
HANDOVER_WORDS = (MISS, GRASP, PUSH)
PUSH_DELAY = (0.0, 0.4)  # s after the push: the policy has seen the moved block by then at 10 Hz or faster
DEFAULT_TAKEOVER_LATENCY = 1  # control ticks
HANDOVER_SEED_OFFSET = 2_000_003  # apart from the scene (seed) and the perturbations (seed + 1_000_003)


class CollectError(Exception):
    """Collection cannot start or stopped; the message is one line."""


def handover_time(seed: int, handover: tuple[float, float]) -> float:
    """The handover time (sim s) of the takeover episode with this seed, uniform in the range."""
    lo, hi = handover
    return float(np.random.default_rng(int(seed) + HANDOVER_SEED_OFFSET).uniform(lo, hi))


@dataclass(frozen=True)
class CollectConfig:
    """What every episode of a collection run shares. handover and latency_ticks apply to
    takeover episodes only (policy set); None there means the defaults (1-10 s, 1 tick)."""

    out: Path
    perturb: float = 0.0
    control_rate: int = 50
    camera_rate: int = 10
    compression: str | None = None
    policy: Path | None = None
    handover: tuple[float, float] | str | None = None
    """(lo, hi) sim seconds, MISS: hand over when the policy's grasp closes on nothing,
    GRASP: as the policy starts to close the gripper, or PUSH: PUSH_DELAY after the push
    (with world "push")."""
    latency_ticks: int | None = None
    assist: bool = False
    """Whether the driving policy runs with the hand-written assist (policy_node's `assist`:
    colour balance, aim correction, grasp check, re-grasp reflex). Off by default: takeover
    rounds label the network's own errors."""
    world: str | None = None
    """A world perturbation (arm_act.sim.perturb: lighting, camera, size, distractors, crowded,
    push) applied to every episode, drawn per episode from its seed: domain randomisation for
    the training data. Use seeds apart from the robustness evaluation's (400000 + ...), so no
    evaluated world is ever trained on."""
    task: str = "box"
    """The goal family of every episode (box | stack | relation | mix: drawn per episode from
    its seed; arm_act.sim.instructions); the expert follows whichever goal an episode has."""
    instruction: str | None = None
    """The same instruction for every episode instead of the task's (an episode whose blocks
    do not fit it stops the run with the reason)."""
    change_goal: str | None = None
    """"AT_S:TO": the goal changes inside every episode (sim.goal_change.GoalChange, as `arm-act
    eval --change-goal`); the expert re-plans, and training reads such a bag from the change on
    (arm_act.data.dataset), the frames where the arm turns to the new goal."""

    def __post_init__(self):
        from arm_act.sim import ExpertConfig

        object.__setattr__(self, "out", Path(self.out))
        self.sim_config()  # raises ValueError for bad rates
        self.world_perturbation()  # ... and for an unknown world perturbation
        ExpertConfig(perturb_prob=self.perturb)  # ... and for a bad perturbation probability
        from arm_act.sim.instructions import TASKS, parse_goal_or_raise

        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r} must be one of {', '.join(TASKS)}")
        if self.instruction is not None:
            parse_goal_or_raise(self.instruction)  # ... and for words that give no goal at all
        self.goal_change()  # ValueError for a bad AT_S:TO
        if not self.plain_task and self.world == "crowded":
            raise ValueError("world='crowded' repeats colours; it runs the box task only")
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression={self.compression!r} must be one of {list(COMPRESSIONS)}")
        if self.policy is None:
            given = [f"{name}={value}" for name, value in (("handover", self.handover),
                                                           ("latency_ticks", self.latency_ticks),
                                                           ("assist", self.assist or None))
                     if value is not None]
            if given:
                raise ValueError(f"{' and '.join(given)}: takeover episodes only; give a policy checkpoint")
            return
        object.__setattr__(self, "policy", Path(self.policy))
        if self.handover is None:
            object.__setattr__(self, "handover", DEFAULT_HANDOVER)
        if self.latency_ticks is None:
            object.__setattr__(self, "latency_ticks", DEFAULT_TAKEOVER_LATENCY)
        if isinstance(self.handover, str):
            if self.handover not in HANDOVER_WORDS:
                raise ValueError(f"handover={self.handover!r} must be (lo, hi) seconds, {MISS!r}, {GRASP!r} "
                                 f"or {PUSH!r}")
            if self.handover == PUSH and self.world != "push":
                raise ValueError(f"handover={PUSH!r} needs world='push' (got world={self.world!r}): "
                                 "nothing else moves the block")
        else:
            lo, hi = map(float, self.handover)
            if not (0 <= lo <= hi < math.inf):
                raise ValueError(f"handover={self.handover} must satisfy 0 <= lo <= hi < inf (seconds)")
            object.__setattr__(self, "handover", (lo, hi))
        if self.latency_ticks < 0:
            raise ValueError(f"latency_ticks={self.latency_ticks} must be >= 0")

    def sim_config(self):
        from arm_act.sim import SimConfig

        return SimConfig(control_rate_hz=self.control_rate, camera_rate_hz=self.camera_rate)

    @property
    def plain_task(self) -> bool:
        """The box task in its own words: bags and records exactly as before task families."""
        return self.task == "box" and self.instruction is None and self.change_goal is None

    def goal_change(self):
        """The sim.goal_change.GoalChange of change_goal (None without one)."""
        from arm_act.sim.goal_change import GoalChange

        return GoalChange.optional(self.change_goal)

    def world_perturbation(self):
        """The perturbation config of `world`, None without one; ValueError for an unknown name."""
        if self.world is None:
            return None
        from arm_act.sim.perturb import perturbation

        try:
            return perturbation(self.world)
        except ValueError:
            from arm_act.sim.perturb import ROBUSTNESS

            raise ValueError(f"world={self.world!r} must be one of {list(ROBUSTNESS)}") from None

    def load_policy(self):
        """The takeover policy's runtime (one inference thread, as every worker runs one);
        CheckpointError or ValueError for a checkpoint that does not fit the sim."""
        from arm_act.policy.runtime import PolicyRuntime

        sim = self.sim_config()
        return PolicyRuntime.from_checkpoint(self.policy, threads=1, cameras=tuple(c.name for c in sim.cameras),
                                             control_rate=sim.control_rate_hz,
                                             image_size=sim.cameras[0].height, colour_balance=self.assist)


class _HandoverAgent:
    """The policy drives until the handover, then the scripted expert takes over from
    whatever state the policy left (ScriptedExpert plans from the state it is reset in) and
    drives to the end. A subclass says when: _hands_over_before(obs), before the policy
    acts on the tick, or _hands_over_instead(obs, cmd), on the policy's command of the tick
    (which is then not used). handover_tick: the first tick the expert commanded, None before."""

    def __init__(self, policy, expert):
        """policy: an arm_act.eval.in_process.PolicyAgent; expert: a sim.rollout.ExpertAgent."""
        self.policy, self.expert = policy, expert
        self.handover_tick: int | None = None

    def reset(self, obs) -> None:
        self.handover_tick = None
        self.policy.reset(obs)

    def _hands_over_before(self, obs) -> bool:
        return False

    def _hands_over_instead(self, obs, cmd) -> bool:
        return False

    def _policy_act(self, obs):
        return self.policy.act(obs)

    def act(self, obs):
        if self.handover_tick is None and not self._hands_over_before(obs):
            cmd = self._policy_act(obs)
            if not self._hands_over_instead(obs, cmd):
                return cmd
        if self.handover_tick is None:
            self.handover_tick = obs.tick
            self.expert.reset(obs)
        return self.expert.act(obs)


class TakeoverAgent(_HandoverAgent):
    """The policy drives until `handover_s` (sim seconds), then the scripted expert takes
    over. Recorded, the expert's part labels the states the policy itself reaches: DAgger's
    idea (Ross et al. 2011) with the expert's own rollout as the label."""

    def __init__(self, policy, expert, handover_s: float):
        if not handover_s >= 0:
            raise ValueError(f"handover_s={handover_s} must be >= 0")
        super().__init__(policy, expert)
        self.handover_s = float(handover_s)

    def _hands_over_before(self, obs) -> bool:
        return obs.time >= self.handover_s - 1e-9


class MissTakeoverAgent(_HandoverAgent):
    """The policy drives until its grasp closes on nothing, then the scripted expert takes
    over (handover MISS). A miss: the policy commands the gripper closed and the fingers
    close past MISS_OPENING, which no block lets them do: a grasp that closed short of the
    block, or a block that slipped out after the lift. The expert plans from that state, so
    its part opens the fingers, goes back over the block and grasps again: the recovery the
    policy is to learn. A NaN finger position is never a miss (the policy keeps driving)."""

    def __init__(self, policy, expert):
        from arm_act.eval.in_process import CLOSED_COMMAND

        super().__init__(policy, expert)
        self._closed_below = CLOSED_COMMAND
        self._closing = False  # the policy's last command closed the gripper

    def reset(self, obs) -> None:
        self._closing = False
        super().reset(obs)

    def _hands_over_before(self, obs) -> bool:
        return self._closing and float(np.mean(obs.joint_state.position[7:9])) < MISS_OPENING

    def _policy_act(self, obs):
        cmd = self.policy.act(obs)
        self._closing = cmd.gripper < self._closed_below
        return cmd


class GraspTakeoverAgent(_HandoverAgent):
    """The policy drives until the tick its gripper command first drops below 3.5 cm
    (GRIPPER_MAX - 5 mm: it starts to close), then the scripted expert takes over on that tick,
    the policy's command unused: the fingers are still open around wherever the policy
    aimed. Within NEAR_GRASP_XY of the block's grasp pose the expert moves straight there
    and grasps (sim.expert), so its part is a correction of the aim; further away it starts
    the approach again. A NaN gripper command never hands over (the comparison is false)."""

    def __init__(self, policy, expert):
        from arm_act.sim.robot import GRIPPER_MAX

        super().__init__(policy, expert)
        self._closing_below = GRIPPER_MAX - 0.005  # m per finger: the policy starts to close

    def _hands_over_instead(self, obs, cmd) -> bool:
        return cmd.gripper < self._closing_below


class PushTakeoverAgent(_HandoverAgent):
    """The policy drives until `delay_s` (sim seconds) after the push moved the named block
    (world push), then the scripted expert takes over and goes to the block where it now is.
    push_time() gives the sim time of the push, None before it (ArmEnv.perturbation_info's
    push_time); an episode in which the push never happens is the policy's alone."""

    def __init__(self, policy, expert, push_time, delay_s: float):
        if not delay_s >= 0:
            raise ValueError(f"delay_s={delay_s} must be >= 0")
        super().__init__(policy, expert)
        self._push_time, self.delay_s = push_time, float(delay_s)

    def _hands_over_before(self, obs) -> bool:
        pushed = self._push_time()
        return pushed is not None and obs.time >= pushed + self.delay_s - 1e-9


class CollectionWorker:
    """One process's env (and takeover policy runtime) that runs and records episodes.

    with CollectionWorker(config) as worker:
        record = worker.collect(spec)
    """

    def __init__(self, config: CollectConfig, policy_dir: Path | None = None):
        """policy_dir: where the takeover checkpoint's files are on this node, when not at
        config.policy (a Ray task's copy); the bags still name config.policy."""
        from arm_act.sim import ArmEnv

        self.config = config
        self.env = ArmEnv(config.sim_config(), perturbation=config.world_perturbation(), task=config.task,
                          instruction=config.instruction, goal_change=config.goal_change())
        self.runtime = None
        try:
            if config.policy is not None:
                where = config if policy_dir is None else dataclasses.replace(config, policy=Path(policy_dir))
                self.runtime = where.load_policy()
        except BaseException:
            self.env.close()
            raise

    def close(self) -> None:
        self.env.close()
        self.runtime = None

    def __enter__(self) -> CollectionWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _agent(self, spec: EpisodeSpec, expert):
        """The episode's agent and its custom_data."""
        config = self.config
        metadata = {"expert": "scripted", "perturb_prob": config.perturb}
        if config.world is not None:
            metadata["world"] = config.world
        if config.policy is None:
            return expert, metadata
        from arm_act.eval.in_process import PolicyAgent

        policy = PolicyAgent(self.runtime, config.latency_ticks, control_rate=self.env.config.control_rate_hz,
                             assist=config.assist)
        if config.handover == PUSH:
            delay = handover_time(spec.seed, PUSH_DELAY)
            metadata.update(policy=str(config.policy), handover=PUSH, push_delay_s=round(delay, 6))
            return PushTakeoverAgent(policy, expert, self._push_time, delay), metadata
        if config.handover in (MISS, GRASP):
            metadata.update(policy=str(config.policy), handover=config.handover)
            agent = MissTakeoverAgent if config.handover == MISS else GraspTakeoverAgent
            return agent(policy, expert), metadata
        handover = handover_time(spec.seed, config.handover)
        metadata.update(policy=str(config.policy), handover_s=round(handover, 6))
        return TakeoverAgent(policy, expert, handover), metadata

    def _push_time(self) -> float | None:
        """Sim time of this episode's push so far, None before it (or without one)."""
        drawn = self.env.perturbation_info()
        return None if drawn is None else drawn.get("push_time")

    def collect(self, spec: EpisodeSpec) -> dict:
        """Run and record one episode; returns its record."""
        from arm_act.sim import ExpertConfig, perturbation_rng
        from arm_act.sim.rollout import ExpertAgent, run_episode

        env, config = self.env, self.config
        expert = ExpertAgent(ExpertConfig(perturb_prob=config.perturb), rng=perturbation_rng(spec.seed))
        agent, metadata = self._agent(spec, expert)
        recorder = EpisodeBagRecorder.for_rollout(config.out, env, spec, compression=config.compression, **metadata)
        try:
            result = run_episode(env, agent, spec.seed, spec.n_blocks, render=True,
                                 on_tick=recorder.record_tick)
        except BaseException as exc:
            recorder.abort(f"episode failed: {type(exc).__name__}: {exc}")
            raise
        finally:
            expert.close()
        record, final = {}, {}
        if agent is not expert:
            tick = agent.handover_tick
            final["expert_from_s"] = "none" if tick is None else repr(round(tick / env.config.control_rate_hz, 6))
            record["expert_from_s"] = None if tick is None else float(final["expert_from_s"])
        if not config.plain_task:  # the goal, for training on a mix of families
            final["goal"] = json.dumps(env.goal.to_dict(), sort_keys=True)
            final["family"] = env.goal.family
            record["family"] = env.goal.family
        if config.change_goal is not None:
            changes = [{"time": round(t, 6), "instruction": text} for t, text in env.goal_changes]
            final["goal_changes"] = json.dumps(changes)
            record["goal_changes"] = changes
        drawn = env.perturbation_info()
        if drawn is not None:
            final["world_drawn"] = json.dumps(drawn, sort_keys=True)
            record["world_drawn"] = drawn
        recorder.finish(result, **final)
        return {"seed": result.seed, "n_blocks": result.n_blocks, "status": result.status,
                "success": bool(result.success), "duration_s": round(float(result.duration), 4),
                "ticks": result.ticks, "frames": recorder.frames, "bag": str(recorder.path),
                "bytes": sum(f.stat().st_size for f in recorder.path.iterdir()), **record}


# ---------------------------------------------------------------- a run
def plan(config: CollectConfig, specs: Sequence[EpisodeSpec], resume: bool) -> tuple[list[EpisodeSpec], int]:
    """The episodes still to collect and how many complete bags are kept. Bags are never
    overwritten: without `resume`, an existing bag is a CollectError; with it, complete
    bags are kept and incomplete ones renamed to <name>.incomplete (never deleted)."""
    existing = [s for s in specs if (config.out / bag_name(s.seed)).exists()]
    if existing and not resume:
        names = [bag_name(s.seed) for s in existing]
        raise CollectError(f"{config.out} already holds {', '.join(names[:3])}{' ...' if len(names) > 3 else ''};"
                           " bags are never overwritten (--resume to keep them and collect the rest)")
    done = set()
    for spec in existing:
        path = config.out / bag_name(spec.seed)
        if is_complete(path):
            done.add(spec.seed)
            continue
        aside = path.with_name(path.name + ".incomplete")
        if aside.exists():
            raise CollectError(f"{aside} exists; remove it or move it away first")
        path.rename(aside)
    return [s for s in specs if s.seed not in done], len(done)


def collect_remote(spec: EpisodeSpec, config: CollectConfig, checkpoint: dict[str, bytes] | None = None) -> dict:
    """A Ray task: record one episode into a temporary directory of the node it runs on;
    -> {"record", "bag" (its directory name), "files" ({relative path: bytes})}.
    checkpoint: the takeover checkpoint's files, written next to it first."""
    import tempfile

    from arm_act.common.ray_pool import files_under, write_files

    with tempfile.TemporaryDirectory(prefix="arm_act_collect_") as tmp:
        policy_dir = None
        if checkpoint is not None:
            policy_dir = Path(tmp) / "checkpoint"
            write_files(policy_dir, checkpoint)
        local = dataclasses.replace(config, out=Path(tmp) / "bags")
        with CollectionWorker(local, policy_dir=policy_dir) as worker:
            record = worker.collect(spec)
        bag = Path(record["bag"])
        return {"record": record, "bag": bag.name, "files": files_under(bag)}


def _run_on_ray(config: CollectConfig, specs: list[EpisodeSpec], address: str, local_cpus: int | None,
                done: Callable[[dict], None], report) -> None:
    from arm_act.common.ray_pool import files_under, ray_session, run_tasks, write_files

    def arrived(_index: int, result: dict) -> None:
        bag = config.out / result["bag"]
        write_files(bag, result["files"])
        done({**result["record"], "bag": str(bag)})

    shared = {"config": config}
    if config.policy is not None:
        shared["checkpoint"] = files_under(config.policy)
    with ray_session(address, local_cpus):
        # No bar of its own: like a local run, progress is the caller's, through on_record.
        run_tasks(collect_remote, specs, desc="collect (ray)", unit="ep", on_result=arrived, report=report,
                  shared=shared, progress=False)


def collect(config: CollectConfig, episodes: int, seed: int, blocks: tuple[int, int], *, workers: int = 1,
            resume: bool = False, on_record: Callable[[dict], None] | None = None,
            ray: str | None = None) -> dict:
    """Collect `episodes` episodes from `seed` (module docstring) into config.out; returns the
    summary (totals and every episode's record, sorted by seed). on_record(record) is called
    as each episode ends. ray: run the episodes as Ray tasks (module docstring); with
    "local", `workers` > 1 sets the local instance's CPUs (else all of this machine's).
    Raises ValueError for bad arguments, CheckpointError for a takeover checkpoint that
    does not load (before any episode runs) and CollectError when the run cannot start or
    an episode fails (on Ray: fails twice)."""
    if episodes < 1 or workers < 1:
        raise ValueError(f"episodes={episodes} and workers={workers} must be >= 1")
    if config.policy is not None:  # a bad checkpoint fails here, before any worker starts
        from arm_act.policy.checkpoint import CheckpointError

        try:
            config.load_policy()
        except (CheckpointError, ValueError, OSError) as exc:
            raise CheckpointError(f"{config.policy}: {exc}") from None
    specs = [episode_spec(i, seed, blocks) for i in range(episodes)]
    specs, kept = plan(config, specs, resume)
    if kept:
        logger.info("resuming: %d complete bags kept, %d episodes to collect", kept, len(specs))
    try:
        config.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CollectError(f"cannot create {config.out}: {exc.strerror or exc}") from None

    started = time.monotonic()
    records: list[dict] = []
    from arm_act.common.ray_pool import TaskReport

    report = TaskReport()

    def done(record: dict) -> None:
        records.append(record)
        if on_record is not None:
            on_record(record)

    try:
        if ray is not None:
            if specs:
                _run_on_ray(config, specs, ray, workers if workers > 1 else None, done, report)
        elif workers == 1:
            with CollectionWorker(config) as worker:
                for spec in specs:
                    done(worker.collect(spec))
        else:
            run_in_processes(CollectionWorker, (config,), "collect", specs, workers, lambda _i, record: done(record))
    except Exception as exc:  # noqa: BLE001 - BagError, sim errors, a worker's RuntimeError: one line
        raise CollectError(f"collect stopped: {exc}") from None
    records.sort(key=lambda r: r["seed"])
    return {
        "out": str(config.out), "episodes": len(records), "successes": sum(r["success"] for r in records),
        "frames": sum(r["frames"] for r in records), "ticks": sum(r["ticks"] for r in records),
        "bytes": sum(r["bytes"] for r in records), "wall_time_s": round(time.monotonic() - started, 2),
        "seed": seed, "blocks": _range_text(blocks), "perturb": config.perturb, "world": config.world,
        "workers": workers, "policy": None if config.policy is None else str(config.policy),
        "handover": (None if config.handover is None
                     else config.handover if isinstance(config.handover, str) else _range_text(config.handover)),
        **({"ray": {"address": ray, **report.to_dict()}} if ray is not None else {}),
        "episodes_detail": records,
    }


def _range_text(bounds) -> str:
    """(2, 5) -> "2-5", (3, 3) -> "3", (1.0, 10.0) -> "1-10": the command line's spelling."""
    lo, hi = (f"{float(v):g}" for v in bounds)
    return lo if lo == hi else f"{lo}-{hi}"
