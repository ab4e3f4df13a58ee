"""Run a recipe (arm_act/pipeline/config.py) stage by stage into one out directory.

    out/
      data/<demo set>/, data/<round>/   bags (arm_act.data.collect.collect)
      checkpoints/stage1/, checkpoints/<round>/   (arm_act.data.training.train_from_bags)
      cache/                            decoded bags and grounding layouts, shared by the trainings
      evals/<eval>.json, evals/robustness.json   (arm_act.eval.evaluate / eval.robustness)
      stages/NN_<stage>.json            a stage's manifest, written last: the stage is done
      checkpoint/                       the final checkpoint (a copy of the last training's)
      report.md, report/*.png           the final report
      pipeline.log                      everything logged, every run appended

Resuming: a stage is done when its manifest exists, was made with the same parameters and
its output is there; a rerun of the same command skips done stages and continues the first
unfinished one where it stopped (collect keeps the complete bags, training resumes from its
train_state). A manifest made with other parameters stops the run (another out directory,
or delete that stage's manifest and output). A run directory moved or copied elsewhere
resumes there: a manifest whose parameters differ only by the old directory's path counts.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from arm_act.pipeline.config import PipelineConfig
from arm_act.policy.inference_config import InferenceConfig, save_inference_config

logger = logging.getLogger(__name__)

STAGE1 = "stage1"
CHECKPOINT_FILES = ("model.safetensors", "config.json", "normalization.json", "metrics.json", "loss_curves.png")


class PipelineError(Exception):
    """A stage that cannot run or failed: one line."""


@dataclass(frozen=True)
class RunOptions:
    """How the stages run (not what they make: a manifest's parameters leave these out).
    device: where training runs (and evaluation, when it names a GPU); ray: an address for
    collection and evaluation; nproc_per_node: data-parallel training processes (torchrun)."""

    device: str = "auto"
    ray: str | None = None
    nproc_per_node: int | None = None
    until: str | None = None  # stop after the stage of this name


@dataclass
class Stage:
    index: int
    name: str
    params: dict
    output: Path
    run: Callable[[], dict]

    @property
    def manifest_name(self) -> str:
        return f"{self.index:02d}_{self.name}.json"


# Fields added to the recipe's specs after runs were made, with the value that means "as before".
_ADDED_DEFAULTS = {"world": None, "task": "box", "phrasing": "canonical", "change_goal": None}


def _spec_params(spec) -> dict:
    """A demo set's, round's or evaluation's fields, the added ones only when not at their
    default: a run made before a key existed keeps its stage digests and still resumes."""
    return {k: v for k, v in dataclasses.asdict(spec).items()
            if k not in _ADDED_DEFAULTS or v != _ADDED_DEFAULTS[k]}


# TrainConfig fields added after runs were made, with the value that means "as before".
_ADDED_TRAIN_DEFAULTS = {"word_dropout": 0.0}


def _train_params(train_config) -> dict:
    """A round's TrainConfig for its digest, the added fields only when not at their default."""
    return {k: v for k, v in train_config.to_dict().items()
            if k not in _ADDED_TRAIN_DEFAULTS or v != _ADDED_TRAIN_DEFAULTS[k]}


def _digest(params: dict) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _made_elsewhere(found: dict, stage: Stage, out: Path) -> str | None:
    """The out directory a manifest was made in, when the run has been moved or copied from
    there to `out` and the manifest's parameters are this stage's with that directory's path
    in place of out's; else None. Stage parameters name paths inside the run (data, policies),
    so a moved run's digests differ while its stages are the same."""
    try:
        rel = str(stage.output.relative_to(out))
    except ValueError:
        return None
    made = str(found.get("output", ""))
    if not made.endswith("/" + rel):
        return None
    old = made[: -len(rel) - 1]
    if not old or old == str(out) or not isinstance(found.get("params"), dict):
        return None
    text = json.dumps(found["params"], sort_keys=True, default=str)
    text = text.replace(json.dumps(old), json.dumps(str(out))).replace(json.dumps(old)[:-1] + "/",
                                                                        json.dumps(str(out))[:-1] + "/")
    return old if _digest(json.loads(text)) == _digest(stage.params) else None


def _write_json(path: Path, data: dict | list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def _checkpoint_complete(path: Path) -> bool:
    return all((path / name).is_file() for name in ("model.safetensors", "config.json", "normalization.json",
                                                     "metrics.json"))


def _every_tenth(total: int, report: Callable[[int, int], None]) -> Callable[[dict], None]:
    """An on_record callback calling report(episodes so far, successes so far) after every
    tenth of `total` episodes and after the last: progress in pipeline.log, where no
    progress bar draws."""
    counts = [0, 0]

    def on_record(record: dict) -> None:
        counts[0] += 1
        counts[1] += bool(record.get("success"))
        if counts[0] % max(1, total // 10) == 0 or counts[0] == total:
            report(*counts)
    return on_record


@contextlib.contextmanager
def _one_line(what: str):
    """Evaluation errors (a checkpoint that does not load, bad settings, Ray, a worker
    process) as PipelineError."""
    from arm_act.common.ray_pool import RayPoolError
    from arm_act.common.worker_pool import WorkerError
    from arm_act.policy.checkpoint import CheckpointError

    try:
        yield
    except (CheckpointError, RayPoolError, WorkerError, ValueError) as exc:
        raise PipelineError(f"{what}: {exc}") from None


class Pipeline:
    """The stages of one recipe in one out directory (module docstring)."""

    def __init__(self, config: PipelineConfig, out: Path, options: RunOptions | None = None):
        self.config, self.out = config, Path(out)
        self.options = options or RunOptions()
        self.stages = self._plan()
        names = [s.name for s in self.stages]
        if self.options.until is not None and self.options.until not in names:
            raise PipelineError(f"until={self.options.until!r} is not a stage; stages are {names}")

    # --- the plan ------------------------------------------------------------------------
    def data_dir(self, name: str) -> Path:
        return self.out / "data" / name

    def checkpoint_dir(self, name: str) -> Path:
        return self.out / "checkpoints" / name

    @property
    def final_checkpoint(self) -> Path:
        return self.checkpoint_dir(self.config.rounds[-1].name if self.config.rounds else STAGE1)

    def _plan(self) -> list[Stage]:
        c = self.config
        stages: list[Stage] = []

        def add(name: str, params: dict, output: Path, run: Callable[[], dict]) -> None:
            stages.append(Stage(len(stages) + 1, name, params, output, run))

        for demo in c.demos:
            add(f"collect_{demo.name}", {"kind": "collect", **_spec_params(demo), "blocks": c.blocks},
                self.data_dir(demo.name),
                lambda d=demo: self._collect(d.name, d.episodes, d.seed, d.perturb, world=d.world, task=d.task,
                                             change_goal=d.change_goal))
        data = [self.data_dir(d.name) for d in c.demos]
        stage1 = {"kind": "train", "data": [str(p) for p in data], "policy": c.policy, "train": c.train}
        if c.init:
            stage1["init"] = c.init
        add(f"train_{STAGE1}", stage1, self.checkpoint_dir(STAGE1),
            lambda data=list(data): self._train(STAGE1, data, c.train_config(init_from=c.init)))
        previous = self.checkpoint_dir(STAGE1)
        for rnd in c.rounds:
            add(f"collect_{rnd.name}", {"kind": "takeover", **_spec_params(rnd), "blocks": c.blocks,
                                        "policy": str(previous)},
                self.data_dir(rnd.name), lambda r=rnd, p=previous: self._collect(
                    r.name, r.episodes, r.seed, 0.0, policy=p, handover=r.handover, latency_ticks=r.latency_ticks,
                    world=r.world, task=r.task, change_goal=r.change_goal))
            data = [*data, self.data_dir(rnd.name)]
            train_config = c.train_config(rnd.train, init_from=str(previous))
            add(f"train_{rnd.name}", {"kind": "train", "data": [str(p) for p in data], "policy": c.policy,
                                      "train": _train_params(train_config)}, self.checkpoint_dir(rnd.name),
                lambda r=rnd, d=list(data), t=train_config: self._train(r.name, d, t))
            previous = self.checkpoint_dir(rnd.name)
        final = self.final_checkpoint
        for spec in c.evals:
            add(f"eval_{spec.name}", {"kind": "eval", **_spec_params(spec), "policy": str(final),
                                      "threads": c.eval_threads, "latency_ticks": c.eval_latency_ticks,
                                      "assist": c.eval_assist},
                self.out / "evals" / f"{spec.name}.json", lambda s=spec: self._eval(s))
        if c.robustness is not None:
            add("robustness", {"kind": "robustness", **dataclasses.asdict(c.robustness), "policy": str(final),
                               "threads": c.eval_threads, "latency_ticks": c.eval_latency_ticks,
                               "assist": c.eval_assist},
                self.out / "evals" / "robustness.json", self._robustness)
        add("report", {"kind": "report", "final": str(final), "stages": [s.name for s in stages]},
            self.out / "report.md", self._report)
        return stages

    # --- running -------------------------------------------------------------------------
    def manifest(self, stage: Stage) -> dict | None:
        path = self.out / "stages" / stage.manifest_name
        return json.loads(path.read_text()) if path.is_file() else None

    def is_done(self, stage: Stage) -> bool:
        """Manifest there, made with these parameters, and the output there. A manifest made
        with other parameters raises PipelineError."""
        found = self.manifest(stage)
        if found is None:
            return False
        if found.get("params_digest") != _digest(stage.params):
            made_in = _made_elsewhere(found, stage, self.out)
            if made_in is not None and stage.output.exists():
                logger.info("%s: made in %s, the same stage there (the run was moved or copied here)",
                            stage.name, made_in)
                return True
            raise PipelineError(f"stage {stage.name} in {self.out} was made with other parameters "
                                f"({self.out / 'stages' / stage.manifest_name}); use another out directory, "
                                "or delete that manifest and the stage's output to redo it")
        return stage.output.exists()

    def run(self, on_stage: Callable[[Stage, str], None] | None = None) -> dict:
        """Run every stage not yet done (up to options.until); -> {"stages": [{name, status,
        wall_time_s}], "report": path or None}. on_stage(stage, "skip"|"start"|"done")."""
        self.out.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(self.out / "pipeline.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        if root.level > logging.INFO or root.level == logging.NOTSET:
            root.setLevel(logging.INFO)
        summary: list[dict] = []
        try:
            logger.info("pipeline %s -> %s: %d stages (%s)", self.config.source or "(recipe)", self.out,
                        len(self.stages), ", ".join(s.name for s in self.stages))
            for stage in self.stages:
                where = f"[{stage.index}/{len(self.stages)}] {stage.name}"
                if self.is_done(stage):
                    logger.info("%s: done before, skipped", where)
                    summary.append({"name": stage.name, "status": "skipped"})
                    if on_stage:
                        on_stage(stage, "skip")
                else:
                    logger.info("%s: started", where)
                    if on_stage:
                        on_stage(stage, "start")
                    earlier = self._earlier_runs(stage)
                    started = time.monotonic()
                    try:
                        result = stage.run()
                    except BaseException:  # interrupted or failed: its time counts when it resumes
                        self._add_unfinished_run(stage, earlier, time.monotonic() - started)
                        raise
                    this_run = time.monotonic() - started
                    wall = round(this_run + sum(earlier), 2)
                    _write_json(self.out / "stages" / stage.manifest_name, {
                        "stage": stage.name, "params": stage.params, "params_digest": _digest(stage.params),
                        "output": str(stage.output), "wall_time_s": wall, "runs_s": [*earlier, round(this_run, 2)],
                        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "result": result})
                    self._runs_file(stage).unlink(missing_ok=True)
                    logger.info("%s: done in %.1f s%s", where, wall,
                                f" over {len(earlier) + 1} runs" if earlier else "")
                    summary.append({"name": stage.name, "status": "ran", "wall_time_s": wall})
                    if on_stage:
                        on_stage(stage, "done")
                if stage.name == self.options.until:
                    logger.info("stopping after %s (until)", stage.name)
                    break
        except KeyboardInterrupt:
            logger.info("interrupted; rerun the same command to continue")
            raise
        finally:
            root.removeHandler(handler)
            handler.close()
        report = self.out / "report.md"
        return {"out": str(self.out), "stages": summary, "report": str(report) if report.is_file() else None,
                "checkpoint": str(self.out / "checkpoint") if (self.out / "checkpoint").is_dir() else None}

    def _runs_file(self, stage: Stage) -> Path:
        return self.out / "stages" / f".{stage.manifest_name}.runs"

    def _earlier_runs(self, stage: Stage) -> list[float]:
        """The wall times of a stage's earlier, unfinished runs (an interrupt or an error
        ended them; resuming continued their work), kept beside its manifest."""
        try:
            runs = json.loads(self._runs_file(stage).read_text())
            return [float(x) for x in runs] if isinstance(runs, list) else []
        except (OSError, ValueError, TypeError):
            return []

    def _add_unfinished_run(self, stage: Stage, earlier: list[float], seconds: float) -> None:
        with contextlib.suppress(OSError):
            _write_json(self._runs_file(stage), [*earlier, round(seconds, 2)])

    # --- the stages ----------------------------------------------------------------------
    def _collect(self, name: str, episodes: int, seed: int, perturb: float, policy: Path | None = None,
                 handover: tuple[float, float] | str | None = None, latency_ticks: int | None = None,
                 world: str | None = None, task: str = "box", change_goal: str | None = None) -> dict:
        from arm_act.common.episodes import parse_blocks
        from arm_act.common.ray_pool import RayPoolError
        from arm_act.data.collect import CollectConfig, CollectError, collect
        from arm_act.policy.checkpoint import CheckpointError

        config = CollectConfig(out=self.data_dir(name), perturb=perturb, policy=policy, handover=handover,
                               latency_ticks=latency_ticks if policy is not None else None, world=world,
                               task=task, change_goal=change_goal)
        on_record = _every_tenth(episodes, lambda n, _successes: logger.info("collect %s: %d episodes this run",
                                                                              name, n))
        try:
            summary = collect(config, episodes, seed, parse_blocks(self.config.blocks), workers=self.config.workers,
                              resume=True, on_record=on_record, ray=self.options.ray)
        except (CollectError, CheckpointError, RayPoolError, ValueError) as exc:
            raise PipelineError(f"collect {name}: {exc}") from None
        from arm_act.bags import find_bags, is_complete

        # An episode whose writer died was set aside as <name>.incomplete (collect's plan):
        # counted apart, never as one of the episodes.
        found = find_bags([self.data_dir(name)])
        bags = [b for b in found if is_complete(b)]
        if len(bags) < episodes:
            raise PipelineError(f"collect {name}: {len(bags)} complete bags of {episodes} in {self.data_dir(name)}")
        return {k: v for k, v in summary.items() if k != "episodes_detail"} | {
            "bags": len(bags), "incomplete_bags": len(found) - len(bags)}

    def _train(self, name: str, data: list[Path], train_config) -> dict:
        out = self.checkpoint_dir(name)
        cache = self.out / "cache"
        policy_config = self.config.policy_config()
        nproc = self.train_processes()
        if nproc:
            self._train_distributed(name, data, out, cache, policy_config, train_config, nproc)
        else:
            from arm_act.data.dataset import DatasetError
            from arm_act.data.training import train_from_bags
            from arm_act.policy.train import TrainingError

            try:
                train_from_bags(data, out, cache, policy_config, train_config, resume=True,
                                progress=sys.stderr.isatty(), device=self.options.device)
            except (DatasetError, TrainingError, ValueError) as exc:
                raise PipelineError(f"train {name}: {exc}") from None
        if not _checkpoint_complete(out):
            raise PipelineError(f"train {name}: {out} holds no complete checkpoint")
        metrics = json.loads((out / "metrics.json").read_text())
        return {"checkpoint": str(out), "steps": metrics.get("steps"), "final": metrics.get("final"),
                "wall_time_s": metrics.get("wall_time_s"), "samples_per_s": metrics.get("samples_per_s"),
                "episodes": metrics.get("data", {}).get("episodes"), "frames": metrics.get("data", {}).get("frames")}

    def train_processes(self) -> int | None:
        """torchrun's process count for a training stage, None to train in this process:
        --nproc-per-node when given, else the recipe's train_processes (capped at the usable
        CPUs) when training on the CPU and it is > 1."""
        if self.options.nproc_per_node:
            return self.options.nproc_per_node
        from arm_act.policy.device import DeviceError, resolve_device

        wanted = min(self.config.train_processes, len(os.sched_getaffinity(0)))
        try:
            on_cpu = resolve_device(self.options.device).type == "cpu"
        except DeviceError:  # the in-process run reports it
            return None
        return wanted if wanted > 1 and on_cpu else None

    def _train_distributed(self, name, data, out, cache, policy_config, train_config, nproc: int) -> None:
        spec = self.out / "stages" / f".train_{name}.json"
        _write_json(spec, {"data": [str(p) for p in data], "out": str(out), "cache": str(cache),
                           "policy": policy_config.to_dict(), "train": train_config.to_dict(),
                           "device": self.options.device, "log": str(self.out / "pipeline.log")})
        from arm_act.policy.distributed import torchrun

        status = torchrun(nproc, [str(spec)], module="arm_act.pipeline.train_worker")
        if status:
            raise PipelineError(f"train {name}: torchrun with {nproc} processes exited "
                                f"with status {status}")

    def _eval_config(self, episodes: int, seed: int, blocks: str, time_limit: float, task: str = "box",
                     phrasing: str = "canonical", change_goal: str | None = None):
        from arm_act.eval.evaluate import EvalConfig
        from arm_act.eval.in_process import PolicySettings

        device = self.options.device
        eval_device = "cpu" if self.options.ray or device in ("auto", "cpu") else device
        settings = PolicySettings(latency_ticks=self.config.eval_latency_ticks, threads=self.config.eval_threads,
                                  device=eval_device, assist=self.config.eval_assist)
        return EvalConfig(policy=self.final_checkpoint, episodes=episodes, seed=seed, blocks=blocks,
                          time_limit=time_limit, settings=settings, ray=self.options.ray,
                          workers=1 if self.options.ray else self.config.workers, task=task, phrasing=phrasing,
                          change_goal=change_goal)

    def _eval(self, spec) -> dict:
        from arm_act.eval.evaluate import evaluate

        progress = _every_tenth(spec.episodes, lambda n, ok: logger.info("eval %s: %d/%d episodes, %d succeeded",
                                                                          spec.name, n, spec.episodes, ok))
        with _one_line(f"eval {spec.name}"):
            summary = evaluate(self._eval_config(spec.episodes, spec.seed, spec.blocks, spec.time_limit, spec.task,
                                                 spec.phrasing, spec.change_goal), on_record=progress)
        _write_json(self.out / "evals" / f"{spec.name}.json", summary)
        return {k: v for k, v in summary.items() if k != "results"}

    def _robustness(self) -> dict:
        from arm_act.eval.robustness import compact, markdown_table, robustness_suite, variants

        spec = self.config.robustness
        names: list[str] = []
        for v in (spec.variants if isinstance(spec.variants, tuple) else (spec.variants,)):
            names += [n for n in variants(v) if n not in names]
        partial = self.out / "evals" / ".robustness_partial.json"
        progress: dict[tuple[str, str], Callable[[dict], None]] = {}

        def on_record(variant: str, who: str, record: dict) -> None:
            if (variant, who) not in progress:
                progress[variant, who] = _every_tenth(spec.episodes, lambda n, ok: logger.info(
                    "robustness %s, %s: %d/%d episodes, %d succeeded", variant, who, n, spec.episodes, ok))
            progress[variant, who](record)

        with _one_line("robustness"):
            table = robustness_suite(self._eval_config(spec.episodes, spec.seed, spec.blocks, spec.time_limit),
                                     names, with_expert=spec.with_expert, on_variant=lambda t: _write_json(partial, t),
                                     on_record=on_record)
        _write_json(self.out / "evals" / "robustness.json", table)
        (self.out / "evals" / "robustness.md").write_text(markdown_table(table) + "\n")
        partial.unlink(missing_ok=True)
        return compact(table)

    def _report(self) -> dict:
        from arm_act.pipeline.report import write_report

        final = self.out / "checkpoint"
        final.mkdir(parents=True, exist_ok=True)
        for name in CHECKPOINT_FILES:
            if (self.final_checkpoint / name).is_file():
                shutil.copy2(self.final_checkpoint / name, final / name)
        # How the recipe's evaluations ran it: the settings the checkpoint's figures hold for.
        c = self.config
        save_inference_config(final, InferenceConfig(latency_ticks=c.eval_latency_ticks, threads=c.eval_threads,
                                                     assist=c.eval_assist))
        manifests = [m for m in (self.manifest(s) for s in self.stages if s.name != "report") if m is not None]
        return write_report(self.out, manifests, self.config)
