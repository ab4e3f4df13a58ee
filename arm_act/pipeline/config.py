"""The recipe of `arm-act pipeline`: a YAML file read into frozen, validated dataclasses.

    blocks: 2-5                       # block counts of every collection
    workers: 2                        # local processes for collection and evaluation
    demos:                            # scripted-expert demonstrations, in order
      - {name: demos_plain, episodes: 400, seed: 0}
      - {name: demos_perturbed, episodes: 200, seed: 400, perturb: 0.3}
    train:                            # stage 1, from scratch on every demonstration set
      config: train_default.json      # {"policy": {...}, "train": {...}}, relative to this file
                                      # (or a list of such files, applied in order)
      init: ../checkpoints/default    # optional: fine-tune this checkpoint instead (relative to this file)
      policy: {}                      # PolicyConfig overrides
      train: {}                       # TrainConfig overrides (steps, lr, ...)
    rounds:                           # takeover rounds: the newest policy drives, the expert
      - name: takeover_1              # takes over at a handover time drawn from `handover`
        episodes: 600                 # (or, with handover: miss, when the policy's grasp closes on
                                      # nothing; grasp: as it starts to close the gripper), then a
                                      # fine-tune from that policy on all data so far
        seed: 300000
        handover: [0.5, 10]
        train: {steps: 5000, lr: 2.5e-4, warmup_steps: 100, hold_after_end: true}
    evals:                            # of the final checkpoint
      - {name: eval_2-5, episodes: 200, seed: 100000, blocks: 2-5}
      - {name: stack_heldout, episodes: 100, seed: 100000, task: stack, phrasing: held-out}
    robustness: {episodes: 50, seed: 400000, blocks: 2-5, variants: all}
    eval_assist: false                # evaluations with policy_node's hand-written assist

Demo sets, rounds and evaluations take `task` (box | stack | relation | mix: the goal family
of their episodes, docs/tasks.md; default box) and `change_goal` ("AT_S:TO": the goal changes
inside every episode, as `arm-act collect|eval --change-goal`), evaluations also `phrasing`
(canonical | training | held-out).

Names become directory names under the run's out directory, so they are identifiers.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # "2-5" too: evaluations are named by their blocks


class PipelineConfigError(ValueError):
    """A recipe that cannot run: one line naming the field."""


def _name(where: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # `name: 6` in YAML
    if not isinstance(value, str) or not _NAME.match(value):
        raise PipelineConfigError(f"{where}: name={value!r} must be letters, digits, _ . - (a directory name)")
    return value


def _int(where: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise PipelineConfigError(f"{where}={value!r} must be an integer >= {low}")
    return value


def _blocks(where: str, value: Any) -> str:
    from arm_act.common.episodes import parse_blocks

    text = str(value)
    try:
        parse_blocks(text)
    except ValueError as exc:
        raise PipelineConfigError(f"{where}: {exc}") from None
    return text


def _only(where: str, data: Any, keys: set[str]) -> dict:
    if not isinstance(data, dict):
        raise PipelineConfigError(f"{where} must be a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - keys)
    if unknown:
        raise PipelineConfigError(f"{where}: unknown keys {unknown} (known: {sorted(keys)})")
    return data


@dataclass(frozen=True)
class DemoSet:
    name: str
    episodes: int
    seed: int
    perturb: float = 0.0
    world: str | None = None  # a world perturbation (domain randomisation), arm_act.data.collect.CollectConfig.world
    task: str = "box"  # the goal family of its episodes (arm_act.sim.instructions.TASKS)
    change_goal: str | None = None  # "AT_S:TO", a goal change inside every episode (sim.goal_change)


@dataclass(frozen=True)
class TakeoverRound:
    name: str
    episodes: int
    seed: int
    handover: tuple[float, float] | str  # [lo, hi] sim seconds, "miss", "grasp" or "push" (arm_act.data.collect)
    train: dict
    latency_ticks: int = 1
    world: str | None = None  # the world the round's episodes run in (as DemoSet.world)
    task: str = "box"  # as DemoSet.task
    change_goal: str | None = None  # as DemoSet.change_goal


@dataclass(frozen=True)
class EvalSpec:
    name: str
    episodes: int
    seed: int
    blocks: str = "2-5"
    time_limit: float = 20.0
    task: str = "box"  # as DemoSet.task
    phrasing: str = "canonical"  # the words of each goal (arm_act.sim.instructions.PHRASINGS)
    change_goal: str | None = None  # as DemoSet.change_goal; success then means the new goal


@dataclass(frozen=True)
class RobustnessSpec:
    episodes: int
    seed: int
    blocks: str = "2-5"
    variants: str | tuple[str, ...] = "all"
    time_limit: float = 20.0
    with_expert: bool = True


@dataclass(frozen=True)
class PipelineConfig:
    """A whole recipe (module docstring). policy / train: the stage-1 configs as dicts
    (the base JSON file with the overrides applied), checked against PolicyConfig and
    TrainConfig when the recipe is read."""

    demos: tuple[DemoSet, ...]
    policy: dict
    train: dict
    rounds: tuple[TakeoverRound, ...] = ()
    evals: tuple[EvalSpec, ...] = ()
    robustness: RobustnessSpec | None = None
    blocks: str = "2-5"
    workers: int = 1
    eval_threads: int = 1
    eval_latency_ticks: int = 1
    source: str = ""
    eval_assist: bool = False  # evaluations run the hand-written assist (policy_node's `assist`)
    # Data-parallel processes for training on the CPU (torchrun; at most the usable CPUs;
    # `arm-act pipeline --nproc-per-node N` overrides it; a GPU run trains in one process).
    train_processes: int = 1
    extra: dict = field(default_factory=dict)
    init: str = ""  # stage 1 fine-tunes this checkpoint (an absolute path) instead of starting from scratch

    def policy_config(self):
        from arm_act.policy.config import PolicyConfig

        return PolicyConfig.from_dict({**PolicyConfig().to_dict(), **self.policy})

    def train_config(self, overrides: dict | None = None, init_from: str = ""):
        from arm_act.policy.train import TrainConfig

        data = {**self.train, **(overrides or {})}
        if init_from:
            data["init_from"] = init_from
        return TrainConfig.from_dict(data)


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PipelineConfigError(f"{where}={value!r} must be true or false")
    return value


def _time_limit(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise PipelineConfigError(f"{where}.time_limit={value!r} must be a number of seconds > 0")
    return float(value)


def _demo_sets(raw: Any) -> list[DemoSet]:
    """The recipe's `demos` list, each set checked."""
    if not isinstance(raw, list) or not raw:
        raise PipelineConfigError("demos: a list of at least one demonstration set is needed")
    demos = []
    for i, d in enumerate(raw):
        d = _only(f"demos[{i}]", d, {"name", "episodes", "seed", "perturb", "world", "task", "change_goal"})
        perturb = d.get("perturb", 0.0)
        if isinstance(perturb, bool) or not isinstance(perturb, (int, float)) or not 0 <= perturb <= 1:
            raise PipelineConfigError(f"demos[{i}].perturb={perturb!r} must be in [0, 1]")
        demos.append(DemoSet(_name(f"demos[{i}]", d.get("name")), _int(f"demos[{i}].episodes", d.get("episodes"), 1),
                             _int(f"demos[{i}].seed", d.get("seed"), 0), float(perturb),
                             _world(f"demos[{i}]", d.get("world")), _task(f"demos[{i}]", d.get("task", "box")),
                             _change_goal(f"demos[{i}]", d.get("change_goal"))))
    return demos


def _change_goal(where: str, text: Any) -> str | None:
    """A goal change "AT_S:TO" (arm_act.sim.goal_change.GoalChange), or None."""
    if text is None:
        return None
    from arm_act.sim.goal_change import GoalChange

    try:
        return str(GoalChange.parse(str(text)))
    except ValueError as exc:
        raise PipelineConfigError(f"{where}.change_goal: {exc}") from None


def _task(where: str, task: Any) -> str:
    """A goal family of arm_act.sim.instructions.TASKS."""
    from arm_act.sim.instructions import TASKS

    if task not in TASKS:
        raise PipelineConfigError(f"{where}.task={task!r} must be one of {list(TASKS)}")
    return str(task)


def _world(where: str, world: Any) -> str | None:
    """A world perturbation's name (arm_act.sim.perturb), or None."""
    if world is None:
        return None
    from arm_act.sim.perturb import ROBUSTNESS

    if world not in ROBUSTNESS:
        raise PipelineConfigError(f"{where}.world={world!r} must be one of {list(ROBUSTNESS)}")
    return str(world)


def _eval_specs(raw: list) -> list[EvalSpec]:
    """The recipe's `evals` list, each evaluation checked."""
    evals = []
    for i, e in enumerate(raw):
        e = _only(f"evals[{i}]", e, {"name", "episodes", "seed", "blocks", "time_limit", "task", "phrasing",
                                     "change_goal"})
        from arm_act.sim.instructions import PHRASINGS

        phrasing = e.get("phrasing", "canonical")
        if phrasing not in PHRASINGS:
            raise PipelineConfigError(f"evals[{i}].phrasing={phrasing!r} must be one of {list(PHRASINGS)}")
        evals.append(EvalSpec(_name(f"evals[{i}]", e.get("name")),
                              _int(f"evals[{i}].episodes", e.get("episodes"), 1),
                              _int(f"evals[{i}].seed", e.get("seed"), 0),
                              _blocks(f"evals[{i}]", e.get("blocks", "2-5")),
                              _time_limit(f"evals[{i}]", e.get("time_limit", 20.0)),
                              _task(f"evals[{i}]", e.get("task", "box")), str(phrasing),
                              _change_goal(f"evals[{i}]", e.get("change_goal"))))
    return evals


def from_dict(data: dict, base_dir: Path, source: str = "") -> PipelineConfig:
    """The recipe of a parsed YAML mapping; base_dir resolves train.config."""
    top = _only("pipeline", data, {"blocks", "workers", "demos", "train", "rounds", "evals", "robustness",
                                   "eval_threads", "eval_latency_ticks", "eval_assist", "train_processes",
                                   "notes"})
    blocks = _blocks("blocks", top.get("blocks", "2-5"))
    workers = _int("workers", top.get("workers", 1), 1)
    demos = _demo_sets(top.get("demos"))
    train_raw = _only("train", top.get("train", {}), {"config", "policy", "train", "init"})
    policy, train = {}, {}
    files = train_raw.get("config", [])
    files = [files] if isinstance(files, str) else files  # one file or a list, applied in order
    if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
        raise PipelineConfigError(f"train.config={train_raw.get('config')!r} must be a JSON file or a list of them")
    for name in files:
        path = Path(name)
        path = path if path.is_absolute() else base_dir / path
        try:
            base = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise PipelineConfigError(f"train.config: {path}: {exc}") from None
        policy.update(base.get("policy", {}))
        train.update(base.get("train", {}))
    policy.update(_only("train.policy", train_raw.get("policy", {}) or {}, set(policy) | _fields("policy")))
    train.update(_only("train.train", train_raw.get("train", {}) or {}, _fields("train")))
    init = ""
    if train_raw.get("init") is not None:
        if not isinstance(train_raw["init"], str) or not train_raw["init"]:
            raise PipelineConfigError(f"train.init={train_raw['init']!r} must be a checkpoint directory")
        path = Path(train_raw["init"])
        path = (path if path.is_absolute() else base_dir / path).resolve()
        if not (path / "config.json").is_file():  # refused before any stage runs, not at stage 1's training
            raise PipelineConfigError(f"train.init={train_raw['init']!r}: {path} holds no checkpoint (config.json)")
        init = str(path)
    from arm_act.data.collect import HANDOVER_WORDS

    rounds = []
    for i, r in enumerate(top.get("rounds", []) or []):
        r = _only(f"rounds[{i}]", r, {"name", "episodes", "seed", "handover", "train", "latency_ticks", "world",
                                      "task", "change_goal"})
        handover = r.get("handover")
        if handover in HANDOVER_WORDS:  # the grasp closed on nothing / starts to close / after the push
            pass
        elif (not isinstance(handover, (list, tuple)) or len(handover) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in handover)
                or not 0 <= handover[0] <= handover[1] < math.inf):
            raise PipelineConfigError(f"rounds[{i}].handover={handover!r} must be [lo, hi] seconds, "
                                      "0 <= lo <= hi, miss, grasp or push")
        else:
            handover = (float(handover[0]), float(handover[1]))
        if handover == "push" and r.get("world") != "push":
            raise PipelineConfigError(f"rounds[{i}].handover='push' needs world: push (got {r.get('world')!r})")
        overrides = _only(f"rounds[{i}].train", r.get("train", {}) or {}, _fields("train"))
        rounds.append(TakeoverRound(_name(f"rounds[{i}]", r.get("name")),
                                    _int(f"rounds[{i}].episodes", r.get("episodes"), 1),
                                    _int(f"rounds[{i}].seed", r.get("seed"), 0),
                                    handover, dict(overrides),
                                    _int(f"rounds[{i}].latency_ticks", r.get("latency_ticks", 1), 0),
                                    _world(f"rounds[{i}]", r.get("world")),
                                    _task(f"rounds[{i}]", r.get("task", "box")),
                                    _change_goal(f"rounds[{i}]", r.get("change_goal"))))
    evals = _eval_specs(top.get("evals", []) or [])
    robustness = None
    if top.get("robustness"):
        rb = _only("robustness", top["robustness"], {"episodes", "seed", "blocks", "variants", "time_limit",
                                                    "with_expert"})
        variants = rb.get("variants", "all")
        if isinstance(variants, list):
            variants = tuple(str(v) for v in variants)
        from arm_act.eval.robustness import variants as expand

        try:
            for v in (variants if isinstance(variants, tuple) else (variants,)):
                expand(v)
        except ValueError as exc:
            raise PipelineConfigError(f"robustness.variants: {exc}") from None
        robustness = RobustnessSpec(_int("robustness.episodes", rb.get("episodes"), 1),
                                    _int("robustness.seed", rb.get("seed"), 0),
                                    _blocks("robustness", rb.get("blocks", "2-5")),
                                    variants, _time_limit("robustness", rb.get("time_limit", 20.0)),
                                    bool(rb.get("with_expert", True)))
    names = [d.name for d in demos] + [r.name for r in rounds]
    if len(set(names)) != len(names):
        raise PipelineConfigError(f"demos and rounds names {names} must be unique (they are data directories)")
    if len({e.name for e in evals}) != len(evals):
        raise PipelineConfigError(f"evals names {[e.name for e in evals]} must be unique")
    config = PipelineConfig(tuple(demos), policy, train, tuple(rounds), tuple(evals), robustness, blocks, workers,
                            _int("eval_threads", top.get("eval_threads", 1), 1),
                            _int("eval_latency_ticks", top.get("eval_latency_ticks", 1), 0), source,
                            train_processes=_int("train_processes", top.get("train_processes", 1), 1),
                            eval_assist=_bool("eval_assist", top.get("eval_assist", False)), init=init)
    try:  # every stage's policy and train config is valid before anything runs
        config.policy_config()
        config.train_config(init_from=init)
        for r in rounds:
            config.train_config(r.train, init_from="previous")
    except (TypeError, ValueError) as exc:
        raise PipelineConfigError(f"train: {exc}") from None
    return config


def _fields(kind: str) -> set[str]:
    import dataclasses

    if kind == "policy":
        from arm_act.policy.config import PolicyConfig

        return {f.name for f in dataclasses.fields(PolicyConfig)}
    from arm_act.policy.train import TrainConfig

    return {f.name for f in dataclasses.fields(TrainConfig)}


def load(path: str | Path) -> PipelineConfig:
    """Read a recipe file (YAML). Raises PipelineConfigError naming what is wrong."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PipelineConfigError(f"{path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise PipelineConfigError(f"{path}: invalid YAML ({exc})") from None
    return from_dict(data, path.parent, source=str(path))
