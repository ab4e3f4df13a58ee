"""`arm-act eval` as a library: closed-loop success rate over seeded episodes.

    config = EvalConfig(policy=Path("checkpoints/default"), episodes=200, seed=100000, blocks="2-5",
                        settings=PolicySettings(threads=1))
    summary = evaluate(config)            # successes, Wilson 95% CI, per block count, every episode

Episode i uses seed S+i and a block count drawn from it (arm_act.common.episodes), exactly as
sim_node schedules them, so in-process and over-ROS runs of the same seeds are the same
scenes. In process, each episode runs through arm_act.eval.in_process (PolicyRunner or
ExpertRunner); over_ros=True runs them through sim_node and policy_node / expert_node over
DDS in lockstep (arm_act.eval.over_ros), and the two agree episode by episode. live=True
runs them through the live nodes as child processes in real time (arm_act.eval.live), with
per-episode real-time diagnostics; compare_in_process then also runs the same seeds in
process and puts both results side by side (`compare`).

ray (an address: local, auto or ray://HOST:PORT; arm_act/common/ray_pool.py) runs each
episode as a Ray task instead, with the latency fixed on the driver (given, or measured
there once) and the checkpoint's files sent to the tasks as bytes; videos and bags come
back as bytes and are written on the driver. The same seeds give the same records as a
local run.

workers > 1 runs the in-process episodes in that many local processes (spawned, each with
its own env and its own copy of the policy, arm_act/common/worker_pool.py), the latency
fixed once here as for Ray; the records are the same as one process's, episode by episode.
on_record(record), if given, is called as each episode ends (the pipeline logs progress
with it).
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arm_act.common.episodes import episode_spec, parse_blocks
from arm_act.common.progress import progress_bar
from arm_act.eval.in_process import ExpertRunner, PolicyRunner, PolicySettings

EXPERT = "expert"


@dataclass(frozen=True)
class EvalConfig:
    """One evaluation run. policy: "expert" or a checkpoint directory; blocks: "N" or "LO-HI";
    video and bags (directories) apply to in-process runs of a checkpoint."""

    policy: str | Path = EXPERT
    episodes: int = 20
    seed: int = 1000
    blocks: str = "2-5"
    camera_rate: int = 10
    control_rate: int = 50
    time_limit: float = 20.0
    over_ros: bool = False
    video: Path | None = None
    bags: Path | None = None
    settings: PolicySettings = field(default_factory=PolicySettings)
    ray: str | None = None
    robustness: str | None = None  # a perturbation of arm_act.sim.perturb (ROBUSTNESS), None: the plain world
    live: bool = False  # the live nodes as child processes in real time (arm_act.eval.live)
    compare_in_process: bool = False  # with live: the same seeds in process too, side by side
    logs: Path | None = None  # with live: the nodes' logs go here (default: a temporary directory)
    real_time_factor: float = 1.0  # with live: sim_node's; below 1 gives the nodes slack on a loaded machine
    workers: int = 1  # local processes for in-process episodes, each with its own env and policy

    def __post_init__(self):
        parse_blocks(self.blocks)  # raises ValueError quoting the text
        self.sim_config()  # ... and for bad rates or time limits
        self.perturbation()  # ... and for an unknown robustness name
        if self.robustness is not None and self.over_ros:
            raise ValueError(f"robustness={self.robustness!r} runs in process (or on Ray); sim_node has no "
                             "perturbations")
        if self.live and (self.over_ros or self.ray is not None or self.robustness is not None
                          or self.video is not None or self.bags is not None):
            raise ValueError("live runs the plain world through the nodes in real time; it does not combine with "
                             "over_ros (lockstep), ray, robustness, video or bags (record a bag with arm-act demo)")
        if not (math.isfinite(self.real_time_factor) and self.real_time_factor > 0):
            raise ValueError(f"real_time_factor={self.real_time_factor} must be > 0 (live runs in real time)")
        if self.compare_in_process and not self.live:
            raise ValueError("compare_in_process compares a live run with the in-process one: it needs live")
        if self.episodes < 1:
            raise ValueError(f"episodes={self.episodes} must be >= 1")
        if self.workers < 1:
            raise ValueError(f"workers={self.workers} must be >= 1")
        if self.workers > 1 and (self.over_ros or self.live or self.ray is not None):
            raise ValueError(f"workers={self.workers} runs in-process episodes in local processes; over_ros and "
                             "live run them through nodes, and ray spreads them over Ray's own workers")
        if self.ray is not None and self.over_ros:
            raise ValueError("ray runs in-process episodes as tasks; over_ros runs them through nodes here")
        if self.ray is not None and self.settings.device != "cpu":
            raise ValueError(f"device={self.settings.device!r}: Ray tasks run the policy on a CPU each; "
                             "the device applies to a local evaluation")
        if self.over_ros and (self.video is not None or self.bags is not None):
            raise ValueError("video and bags apply to in-process evaluation; record a bag with bag_recorder")
        if self.policy != EXPERT and not Path(self.policy).is_dir():
            raise ValueError(f"policy={str(self.policy)!r} is neither 'expert' nor a checkpoint directory")

    @property
    def checkpoint(self) -> Path | None:
        return None if self.policy == EXPERT else Path(self.policy)

    def perturbation(self):
        """The sim.perturb config of `robustness` (None without one)."""
        if self.robustness is None:
            return None
        from arm_act.sim.perturb import perturbation

        return perturbation(self.robustness)

    def make_env(self):
        from arm_act.sim import ArmEnv

        return ArmEnv(self.sim_config(), perturbation=self.perturbation())

    def sim_config(self):
        from arm_act.sim import SimConfig

        return SimConfig(control_rate_hz=self.control_rate, camera_rate_hz=self.camera_rate,
                         episode_time_limit=self.time_limit)


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial rate (better than the normal
    approximation near 0 and 1, where our rates live)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


# Edges (cm) of the histogram of first-grasp errors in summaries; the last bin is open.
GRASP_ERROR_BINS_CM = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def grasp_precision(results: list[dict]) -> dict:
    """How far the first grasp closed from the named block's centre, horizontally (cm), over
    the episodes that closed the gripper at all, and whether that grasp held (lifted the block).
    -> {"closed": n, "held": n, "closed_on_nothing": n, "xy_cm_p50", "xy_cm_p90", "xy_cm_max",
        "histogram": {"edges_cm": [...], "counts": [...]}} (percentiles None without a grasp)."""
    xy = np.array([r["first_grasp_xy_cm"] for r in results if r.get("first_grasp_xy_cm") is not None])
    edges = list(GRASP_ERROR_BINS_CM)
    counts = np.histogram(xy, bins=[*edges, np.inf])[0] if xy.size else np.zeros(len(edges), dtype=int)
    closed = sum(1 for r in results if r.get("grasps", 0) >= 1)

    def pct(q: float) -> float | None:
        return round(float(np.percentile(xy, q)), 2) if xy.size else None

    return {"closed": closed, "held": sum(1 for r in results if r.get("first_grasp_held")),
            "closed_on_nothing": sum(1 for r in results if r.get("first_grasp_missed")),
            "xy_cm_p50": pct(50), "xy_cm_p90": pct(90), "xy_cm_max": pct(100),
            "histogram": {"edges_cm": edges, "counts": [int(c) for c in counts]}}


def describe_grasp_precision(g: dict) -> str:
    """One line for a summary: 'first grasp 0.61 cm p50, 1.40 cm p90 (n=200), 3 closed on nothing'."""
    if g["xy_cm_p50"] is None:
        return "no grasp closed"
    return (f"first grasp {g['xy_cm_p50']:.2f} cm p50, {g['xy_cm_p90']:.2f} cm p90 from the block's centre "
            f"(n={g['closed']}), {g['closed_on_nothing']} closed on nothing")


def summarize(results: list[dict], extra: dict) -> dict:
    """The summary of episode records: rate, CI, per block count, statuses, partial progress
    and the target head's error where the records have them; `extra` keys come first."""
    n = len(results)
    successes = sum(1 for r in results if r["success"])
    low, high = wilson_interval(successes, n)
    by_blocks: dict[int, list[bool]] = {}
    for r in results:
        by_blocks.setdefault(r["n_blocks"], []).append(r["success"])
    if results and "lifted_named_block" in results[0]:  # policies: where the failures happen
        extra = {**extra, "lifted_named_block": sum(r["lifted_named_block"] for r in results),
                 "lifted_other_block": sum(r["lifted_other_block"] for r in results)}
    if results and "first_grasp_missed" in results[0]:  # re-grasps: the first grasp closed on nothing
        missed = [r for r in results if r["first_grasp_missed"]]
        extra = {**extra, "regrasp": {"missed_first_grasp": len(missed),
                                      "succeeded_after_miss": sum(r["success"] for r in missed),
                                      "never_grasped": sum(1 for r in results if r["grasps"] == 0)}}
    if results and "first_grasp_missed" in results[0]:
        extra = {**extra, "grasp_precision": grasp_precision(results)}
    if results and results[0].get("perturbation") is not None and results[0]["perturbation"]["kind"] == "push":
        extra = {**extra, "pushed": sum(1 for r in results if r["perturbation"]["pushed"])}
    grounding = sorted(r["target_error"]["first_cm"] for r in results if "target_error" in r)
    if grounding:  # where the target head puts the named block at the first camera pair
        extra = {**extra, "target_error_first_cm_median": grounding[len(grounding) // 2]}
    return {
        **extra,
        "episodes": n,
        "successes": successes,
        "success_rate": successes / n if n else 0.0,
        "ci95": [round(low, 4), round(high, 4)],
        "by_blocks": {str(k): {"episodes": len(v), "success_rate": sum(v) / len(v)}
                      for k, v in sorted(by_blocks.items())},
        "statuses": {s: sum(1 for r in results if r["status"] == s) for s in ("success", "failure", "timeout")},
        "results": results,
    }


def run_one(runner, env, spec) -> dict:
    """One episode's record, with what its perturbation drew and did (if the env has one)."""
    record = runner.run(env, spec)
    if env.perturbation is not None:
        record["perturbation"] = env.perturbation_info()
    return record


class EpisodeWorker:
    """One worker process of a local evaluation: its own env and runner (the policy loaded
    with the latency the parent fixed, or the expert); run(spec) -> the episode's record."""

    def __init__(self, config: EvalConfig, latency_ticks: int):
        if config.checkpoint is None:
            self.runner = ExpertRunner()
        else:
            settings = dataclasses.replace(config.settings, latency_ticks=latency_ticks)
            self.runner = PolicyRunner.load(config.checkpoint, config.sim_config(), settings,
                                            video_dir=config.video, bags_dir=config.bags)
        self.env = config.make_env()

    def __enter__(self) -> EpisodeWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.env.close()

    def run(self, spec) -> dict:
        return run_one(self.runner, self.env, spec)


def _in_process(config: EvalConfig, runner, on_record: Callable[[dict], None] | None = None) -> list[dict]:
    from arm_act.common.worker_pool import run_in_processes

    blocks = parse_blocks(config.blocks)
    specs = [episode_spec(index, config.seed, blocks) for index in range(config.episodes)]
    results: dict[int, dict] = {}
    with progress_bar(total=config.episodes, desc="eval", unit="ep") as bar:
        def done(index: int, record: dict) -> None:
            results[index] = record
            bar.update(1)
            bar.set_postfix(success=f"{sum(r['success'] for r in results.values())}/{len(results)}")
            if on_record is not None:
                on_record(record)

        if config.workers > 1:
            latency = runner.latency_ticks if isinstance(runner, PolicyRunner) else 0
            run_in_processes(EpisodeWorker, (config, latency), "run", specs, config.workers, done)
        else:
            env = config.make_env()
            try:
                for index, spec in enumerate(specs):
                    done(index, run_one(runner, env, spec))
            finally:
                env.close()
    return [results[index] for index in range(len(specs))]


def evaluate_remote(spec, config: EvalConfig, latency_ticks: int = 0,
                    checkpoint: dict[str, bytes] | None = None) -> dict:
    """A Ray task: one episode on the node it runs on -> {"record", "files"}: the files are
    the video and bag it wrote, relative to "video/" and "bags/" (for the driver to write)."""
    import dataclasses
    import tempfile

    from arm_act.common.ray_pool import files_under, write_files

    with tempfile.TemporaryDirectory(prefix="arm_act_eval_") as tmp:
        root = Path(tmp)
        if config.checkpoint is None:
            runner = ExpertRunner()
        else:
            write_files(root / "checkpoint", checkpoint or {})
            # The driver's latency, so that no task measures its own.
            settings = dataclasses.replace(config.settings, latency_ticks=latency_ticks)
            runner = PolicyRunner.load(root / "checkpoint", config.sim_config(), settings,
                                       video_dir=None if config.video is None else root / "out" / "video",
                                       bags_dir=None if config.bags is None else root / "out" / "bags",
                                       named=config.checkpoint)
        env = config.make_env()
        try:
            record = run_one(runner, env, spec)
        finally:
            env.close()
        return {"record": record, "files": files_under(root / "out") if (root / "out").is_dir() else {}}


def _on_ray(config: EvalConfig, runner, on_record: Callable[[dict], None] | None = None) -> tuple[list[dict], dict]:
    from arm_act.common.ray_pool import TaskReport, files_under, ray_session, run_tasks, write_files

    blocks = parse_blocks(config.blocks)
    specs = [episode_spec(index, config.seed, blocks) for index in range(config.episodes)]
    outputs = {"video": config.video, "bags": config.bags}
    successes = []

    def arrived(_index: int, result: dict) -> None:
        successes.append(result["record"]["success"])
        if on_record is not None:
            on_record(result["record"])
        for kind, directory in outputs.items():
            mine = {name.partition("/")[2]: data for name, data in result["files"].items()
                    if name.partition("/")[0] == kind}
            if directory is not None and mine:
                write_files(directory, mine)

    shared = {"config": config}
    if config.checkpoint is not None:
        shared["latency_ticks"] = runner.latency_ticks
        shared["checkpoint"] = files_under(config.checkpoint)
    report = TaskReport()
    with ray_session(config.ray):
        results = run_tasks(evaluate_remote, specs, desc="eval (ray)", unit="ep", on_result=arrived,
                            report=report, shared=shared)
    return [r["record"] for r in results], {"address": config.ray, **report.to_dict()}


def evaluate(config: EvalConfig, on_record: Callable[[dict], None] | None = None) -> dict:
    """Run the episodes (module docstring) and summarize them. Raises CheckpointError or
    ValueError for a checkpoint that does not load or fit the sim. Progress goes to stderr."""
    if config.checkpoint is None:
        runner = ExpertRunner()
    else:  # over ROS too: the latency (given or measured here) is the one policy_node then uses
        runner = PolicyRunner.load(config.checkpoint, config.sim_config(), config.settings,
                                   video_dir=config.video, bags_dir=config.bags)
    started = time.monotonic()
    extra = {}
    if config.ray is not None:
        results, extra["ray"] = _on_ray(config, runner, on_record)
    elif config.live:
        from arm_act.eval.live import compare, run_live

        results, extra["live"] = run_live(config, logs=config.logs)
        if config.compare_in_process:
            in_process = _in_process(config, runner)
            extra["in_process"] = summarize(in_process, {"policy": runner.describe})
            extra["compare"] = compare(results, in_process)
    elif config.over_ros:
        from arm_act.eval.over_ros import run_over_ros

        latency = runner.describe["latency_ticks"] if isinstance(runner.describe, dict) else 0
        results = run_over_ros(config, latency)
    else:
        results = _in_process(config, runner, on_record)
    return summarize(results, {
        "policy": runner.describe,
        "seed": config.seed,
        "blocks": config.blocks,
        "camera_rate": config.camera_rate,
        "control_rate": config.control_rate,
        "over_ros": bool(config.over_ros),
        "robustness": config.robustness,
        "workers": config.workers,
        "wall_time_s": round(time.monotonic() - started, 2),
        **extra,
    })
