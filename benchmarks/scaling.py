"""Scaling figures: collection and evaluation episodes/min on 1 and 2 local workers and on a
local Ray instance, training samples/s on 1 and 2 data-parallel (torchrun, gloo) processes,
and on a GPU when there is one.

    python benchmarks/scaling.py [--episodes 12] [--eval-episodes 8] [--steps 40]
                                 [--out benchmarks/results/scaling.json]

Every figure comes from the real commands' code paths: arm_act.data.collect.collect (workers
1 and 2, and ray="local"), arm_act.eval.evaluate.evaluate (the shipped checkpoint, on 1 and 2
local processes and on Ray), and `arm-act train` on
the bags this run collected (default policy config, global batch 32, one torch thread per
process), run as `torchrun --standalone --nproc-per-node N`. Ray rows exclude the instance's
start-up, which is reported on its own. The JSON records the machine, its load average
before and after, and a note: on a shared or busy machine the figures are lower bounds.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHIPPED = ROOT / "checkpoints" / "default"
ARM_ACT = str(Path(sys.executable).with_name("arm-act"))


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def collect_rates(work: Path, episodes: int, eval_episodes: int) -> tuple[list[dict], Path]:
    from arm_act.common.ray_pool import ray_session
    from arm_act.data.collect import CollectConfig, collect

    rows = []
    for label, kwargs in (("1 local worker", {"workers": 1}), ("2 local workers", {"workers": 2})):
        out = work / f"collect_{kwargs['workers']}"
        summary = collect(CollectConfig(out=out), episodes, 0, (2, 5), **kwargs)
        rows.append({"how": label, "episodes": episodes, "wall_s": summary["wall_time_s"],
                     "episodes_per_min": round(60 * episodes / summary["wall_time_s"], 1)})
        print(rows[-1], flush=True)
    started = time.monotonic()
    with ray_session("local", local_cpus=2):
        startup = time.monotonic() - started
        summary = collect(CollectConfig(out=work / "collect_ray"), episodes, 0, (2, 5), ray="local")
        rows.append({"how": "Ray, local instance, 2 CPUs", "episodes": episodes, "wall_s": summary["wall_time_s"],
                     "episodes_per_min": round(60 * episodes / summary["wall_time_s"], 1),
                     "ray_startup_s": round(startup, 1), "ray": summary["ray"]})
        print(rows[-1], flush=True)
        evals = eval_rates(eval_episodes)
    return rows + evals, work / "collect_1"


def eval_rates(episodes: int) -> list[dict]:
    from arm_act.eval.evaluate import EvalConfig, evaluate
    from arm_act.eval.in_process import PolicySettings

    rows = []
    settings = PolicySettings(threads=1, latency_ticks=1)
    for label, extra in (("eval, 1 local process", {}), ("eval, 2 local processes", {"workers": 2}),
                         ("eval, Ray, local instance, 2 CPUs", {"ray": "local"})):
        config = EvalConfig(policy=SHIPPED, episodes=episodes, seed=100000, settings=settings, **extra)
        summary = evaluate(config)
        rows.append({"how": label, "episodes": episodes, "wall_s": summary["wall_time_s"],
                     "episodes_per_min": round(60 * episodes / summary["wall_time_s"], 1),
                     "successes": summary["successes"]})
        print(rows[-1], flush=True)
    return rows


def train_rate(data: Path, work: Path, nproc: int | None, steps: int, device: str = "cpu",
               threads: int = 1) -> dict:
    out = work / f"train_{nproc}_{device}_{threads}"
    args = ["train", "--data", str(data), "--out", str(out), "--cache", str(work / "cache"),
            "--steps", str(steps), "--batch-size", "32", "--device", device, "--no-resume",
            "--config", f"threads={threads}", "val_every=100000", "checkpoint_every=100000", "val_fraction=0"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if nproc is None:
        command = [ARM_ACT, *args]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                   ARM_ACT, *args]
    started = time.monotonic()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    metrics = json.loads((out / "metrics.json").read_text())
    return {"how": f"train, {nproc or 1} process(es) x {threads} thread(s), {metrics['device']}",
            "processes": metrics["distributed"]["world_size"], "threads_per_process": threads,
            "global_batch": metrics["distributed"]["global_batch"], "steps": metrics["steps"],
            "samples_per_s": metrics["samples_per_s"], "command_wall_s": round(time.monotonic() - started, 1)}


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=12, help="collection episodes per row")
    parser.add_argument("--eval-episodes", type=int, default=8, help="evaluation episodes per row")
    parser.add_argument("--steps", type=int, default=40, help="training steps per row")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scaling.json")
    args = parser.parse_args()
    report = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                          "torch": torch.__version__, "cuda": torch.cuda.is_available(), "load_1min_start": _load()},
              "note": ("CPU timings on a shared machine: other jobs were running (see the load averages), so "
                       "these are lower bounds and the ratios between rows are what to read.")}
    work = Path(tempfile.mkdtemp(prefix="arm_act_scaling_"))
    try:
        report["collect_and_eval"], data = collect_rates(work, args.episodes, args.eval_episodes)
        rows = [train_rate(data, work, None, args.steps),
                train_rate(data, work, None, args.steps, threads=2),
                train_rate(data, work, 2, args.steps)]
        for row in rows:
            print(row, flush=True)
        if torch.cuda.is_available():
            rows.append(train_rate(data, work, None, args.steps, device="cuda"))
            report["gpu"] = torch.cuda.get_device_name(0)
        else:
            report["gpu"] = "skipped: no CUDA GPU on this machine (torch.cuda.is_available() is False)"
        report["train"] = rows
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["machine"]["load_1min_end"] = _load()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
