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
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from arm_act.common.episodes import episode_spec, parse_blocks
from arm_act.common.progress import progress_bar
from arm_act.eval.config import EXPERT, EvalConfig
from arm_act.eval.in_process import ExpertRunner, PolicyRunner, PolicySettings
from arm_act.eval.stats import (
    GRASP_ERROR_BINS_CM,
    describe_grasp_precision,
    grasp_precision,
    summarize,
    wilson_interval,
)

__all__ = ["EXPERT", "GRASP_ERROR_BINS_CM", "EvalConfig", "PolicySettings", "describe_grasp_precision", "evaluate",
           "grasp_precision", "summarize", "wilson_interval"]


def run_one(runner, env, spec) -> dict:
    """One episode's record, with what its perturbation drew and did (if the env has one),
    and the goal's family and goal unless the env runs the plain box task. With a goal
    change the goal is the one at the end, and goal_changes lists (time, instruction) of
    each change (empty when the episode ended first), goal_change_refused why it was not
    made (None when it was, or never came due), lifted_at_change the blocks in the gripper then."""
    record = runner.run(env, spec)
    plain = env.task == "box" and env.fixed_instruction is None and env.phrasing == "canonical"
    if not plain or env.goal_change is not None:
        record["family"] = env.goal.family
        record["goal"] = env.goal.to_dict()
        record["final_place"] = final_place(env.objects(), env.goal)
    if env.goal_change is not None:
        record["goal_changes"] = [{"time": round(t, 4), "instruction": text} for t, text in env.goal_changes]
        record["goal_change_refused"] = env.goal_change_refused
        record["lifted_at_change"] = env.goal_change_lifted
    if env.perturbation is not None:
        record["perturbation"] = env.perturbation_info()
    return record


def final_place(objects, goal) -> dict | None:
    """Where the episode left the block to move, against what its goal places it by: the
    reference block for stack and relation, the box for box. Centres in cm at the end, and
    the named block's horizontal offset from the reference (cm). A failed place reads from
    it: a block left far from every reference it was asked for was taken to the wrong spot,
    one above its reference was not let go. None when either object is missing."""
    by_colour = {o.colour: o for o in objects if o.kind == "block"}
    named = by_colour.get(goal.colour)
    reference = (next((o for o in objects if o.kind == "box"), None) if goal.reference is None
                 else by_colour.get(goal.reference))
    if named is None or reference is None:
        return None
    a, b = (100.0 * np.asarray(o.position, dtype=np.float64) for o in (named, reference))
    return {"named_cm": [round(float(v), 2) for v in a], "reference_cm": [round(float(v), 2) for v in b],
            "offset_xy_cm": [round(float(v), 2) for v in a[:2] - b[:2]],
            "distance_xy_cm": round(float(np.hypot(*(a[:2] - b[:2]))), 2)}


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


def goal_change_summary(change: str, results: list[dict]) -> dict:
    """How the episodes of a run with a goal change went: how many changed their goal (an
    episode that ended before the change time, or whose layout refused it, did not) and
    how many of those reached the new goal."""
    changed = [r for r in results if r.get("goal_changes")]
    reached = sum(bool(r["success"]) for r in changed)
    # A block in the gripper at the change: the old goal's, set down first (box), or carried on (stack).
    holding = [r for r in changed if r.get("lifted_at_change")]
    return {"change": change, "episodes_changed": len(changed),
            "ended_before": sum(not r.get("goal_changes") and not r.get("goal_change_refused") for r in results),
            "refused": sum(bool(r.get("goal_change_refused")) for r in results),
            "reached_new_goal": reached, "new_goal_rate": reached / len(changed) if changed else None,
            "changed_with_a_block_in_hand": len(holding),
            "reached_with_a_block_in_hand": sum(bool(r["success"]) for r in holding)}


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
    if config.change_goal is not None:
        extra["goal_change"] = goal_change_summary(config.change_goal, results)
    return summarize(results, {
        "policy": runner.describe,
        "seed": config.seed,
        "blocks": config.blocks,
        "camera_rate": config.camera_rate,
        "control_rate": config.control_rate,
        "over_ros": bool(config.over_ros),
        "robustness": config.robustness,
        **({} if config.plain_task else {"task": config.task, "instruction": config.instruction,
                                          "phrasing": config.phrasing}),
        "workers": config.workers,
        "wall_time_s": round(time.monotonic() - started, 2),
        **extra,
    })
