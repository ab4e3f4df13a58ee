"""Training throughput of the shipped recipe, with the older training paths beside today's, on real bags.

    python -m arm_act.bench.train_speed --data BAGS --steps 300 --out benchmarks/results/train_speed.json

Variants (config/train_default.json, batch 32 global, the same seed and data):
- before: one process, the code that trained the shipped checkpoint: torch's dropout
  (policy/dropout.py IMPL = "torch"), float32 matrix products, the clamped-index gather for
  the augmentation's shift (bit-identical to today's edge-padded windows, only slower) and
  AdamW's per-parameter loop (policy/train.py OPTIMIZER = "loop");
- after: one process, today's code and the recipe's config (the cheaper dropout mask, IMPL =
  "fast"; the fused AdamW; matmul_precision as config/train_default.json sets it);
- after_ddp2: today's code on 2 DDP processes of one thread each, batch 16 per process: what
  the shipped recipe runs now (config/pipeline_default.yaml train_processes: 2; the same as
  `arm-act train --nproc-per-node 2`, a child process here; its figure excludes start-up).
The in-process variants run alternately (A B A B) so a change of machine load affects both;
samples/s is train() 's own (training time only: no validation, no start-up). The loss
curves (the training L1 every log_every steps) of before and after, same seed, are compared:
the masks differ, so they agree within noise, not bit for bit; the report gives the largest
difference, and for scale the same comparison between `before` and `before` with the next
seed (curve_before_vs_before_next_seed) and each curve's step-to-step noise.
*_recipe_training_minutes: the shipped recipe's 20 000 steps at that rate (the target: <= 64);
recipe_training_minutes: at the rate of the variant the recipe runs (after_ddp2 when measured).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

GROUNDING_LAYOUTS = 200  # the shipped recipe renders 12000; the per-sample cost is the same
# The shipped recipe's training stages (docs/training.md, config/pipeline_default.yaml): 12 000
# steps, then 5 000 and 3 000 of fine-tuning, all at batch 32.
RECIPE_STEPS = 12_000 + 5_000 + 3_000


def _configs(steps: int, threads: int | None = None, seed: int | None = None, original: bool = False):
    from arm_act.common.paths import config_file
    from arm_act.policy.config import PolicyConfig
    from arm_act.policy.train_config import TrainConfig

    recipe = json.loads(config_file("train_default.json").read_text())
    train = {**recipe["train"], "steps": steps, "val_every": 10**9, "checkpoint_every": 10**9,
             "grounding_layouts": GROUNDING_LAYOUTS, "warmup_steps": min(recipe["train"]["warmup_steps"], steps // 2)}
    if threads is not None:
        train["threads"] = threads
    if seed is not None:
        train["seed"] = seed
    if original:  # float32 products, as the shipped checkpoint was trained
        train["matmul_precision"] = "fp32"
    return PolicyConfig(**recipe["policy"]), TrainConfig(**train), recipe


def _history(out: Path) -> list[dict]:
    return json.loads((out / "train_state" / "state.json").read_text())["history"]["train"]


def clamped_gather_shift(flat, shift, pad: int):
    """The augmentation's shift as the shipped checkpoint's code made it: one gather with
    clamped indices (policy/data.py's edge-padded windows give the same pixels, faster)."""
    import torch

    bc, h, w, _ = flat.shape
    rows = (torch.arange(h)[None, :] + shift[0][:, None]).clamp_(0, h - 1)  # (BC, H)
    cols = (torch.arange(w)[None, :] + shift[1][:, None]).clamp_(0, w - 1)  # (BC, W)
    n = torch.arange(bc)[:, None, None]
    return flat[n, rows[:, :, None], cols[:, None, :]]


def run_in_process(data, impl: str, steps: int, out: Path, threads: int | None = None,
                   seed: int | None = None, original: bool = False) -> dict:
    """impl: policy/dropout.py IMPL; original: also the shift gather and optimizer loop the
    shipped checkpoint was trained with (the `before` variant)."""
    from arm_act.policy import data as policy_data
    from arm_act.policy import dropout
    from arm_act.policy import train as train_module

    policy_config, train_config, _ = _configs(steps, threads, seed, original)
    saved = dropout.IMPL, policy_data._shift_edge_padded, train_module.OPTIMIZER
    dropout.IMPL = impl
    if original:
        policy_data._shift_edge_padded, train_module.OPTIMIZER = clamped_gather_shift, "loop"
    try:
        metrics = train_module.train(data.demos, policy_config, train_config, out, resume=False, progress=False,
                                     data_info=data.info, grounding=data.grounding, device="cpu")
    finally:
        dropout.IMPL, policy_data._shift_edge_padded, train_module.OPTIMIZER = saved
    return {"samples_per_s": metrics["samples_per_s"], "train_time_s": metrics["train_time_s"],
            "curve": [(p["step"], p["l1"]) for p in _history(out)]}


def run_ddp(bags: Path, cache: Path, steps: int, out: Path, nproc: int = 2) -> dict:
    """`arm-act train --nproc-per-node N` on the same bags (threads 1 per process)."""
    from arm_act.common.paths import config_file

    overrides = [f"steps={steps}", "val_every=1000000000", "checkpoint_every=1000000000",
                 f"grounding_layouts={GROUNDING_LAYOUTS}", f"warmup_steps={min(300, steps // 2)}", "threads=1"]
    command = [sys.executable, "-m", "arm_act.cli", "train", "--data", str(bags), "--out", str(out),
               "--cache", str(cache), "--no-resume", "--device", "cpu", "--nproc-per-node", str(nproc),
               "--config", str(config_file("train_default.json")), *overrides]
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    metrics = json.loads((out / "metrics.json").read_text())
    return {"samples_per_s": metrics["samples_per_s"], "train_time_s": metrics["train_time_s"],
            "wall_s_with_startup": time.perf_counter() - started,
            "curve": [(p["step"], p["l1"]) for p in _history(out)]}


def compare_curves(a: list, b: list) -> dict:
    """Largest |a - b| over the common logged steps, and for scale the mean |difference| of
    each curve's neighbouring points (its own step-to-step noise)."""
    da, db = dict(a), dict(b)
    steps = sorted(set(da) & set(db))
    if not steps:
        return {"points": 0}
    x, y = np.array([da[s] for s in steps]), np.array([db[s] for s in steps])
    diff = np.abs(x - y)
    noise = float(np.mean(np.abs(np.diff(x)))) if len(x) > 1 else None
    return {"points": len(steps), "max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()),
            "mean_abs_diff_last_third": float(diff[len(diff) * 2 // 3:].mean()),
            "before_neighbour_noise": noise, "before_first": float(x[0]), "before_last": float(x[-1]),
            "after_first": float(y[0]), "after_last": float(y[-1])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a directory of bags (arm-act collect)")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--steps", type=int, default=300, help="steps per run")
    parser.add_argument("--repeats", type=int, default=2, help="A B rounds of the in-process variants")
    parser.add_argument("--no-ddp", action="store_true")
    parser.add_argument("--no-seed-noise", action="store_true",
                        help="skip the run of `before` with the next seed (the scale of 'within noise')")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    import torch

    from arm_act.data.training import prepare_training_data

    policy_config, train_config, recipe = _configs(args.steps)
    with tempfile.TemporaryDirectory(prefix="arm_act_train_speed_") as scratch:
        scratch = Path(scratch)
        cache = args.cache or scratch / "cache"
        data = prepare_training_data([args.data], cache, policy_config, train_config)
        runs: dict[str, list] = {"before": [], "after": []}
        started = os.getloadavg()[0]
        for r in range(args.repeats):
            for name, impl in (("before", "torch"), ("after", "fast")):
                print(f"train_speed: {name} round {r + 1}", file=sys.stderr, flush=True)
                runs[name].append(run_in_process(data, impl, args.steps, scratch / f"{name}{r}",
                                                 original=name == "before"))
        other_seed = None
        if not args.no_seed_noise:
            print("train_speed: before with the next seed", file=sys.stderr, flush=True)
            other_seed = run_in_process(data, "torch", args.steps, scratch / "before_seed",
                                        seed=train_config.seed + 1, original=True)
        ddp = None
        if not args.no_ddp:
            print("train_speed: after_ddp2", file=sys.stderr, flush=True)
            ddp = run_ddp(args.data, cache, args.steps, scratch / "ddp2")

    def rate(rows):
        return float(np.median([row["samples_per_s"] for row in rows]))

    before, after = rate(runs["before"]), rate(runs["after"])
    report = {
        "steps": args.steps, "batch_size": train_config.batch_size, "threads": train_config.threads,
        "frames": sum(e.n_frames for e in data.demos), "grounding_layouts": GROUNDING_LAYOUTS,
        "episodes": len(data.demos), "torch": torch.__version__, "usable_cpus": len(os.sched_getaffinity(0)),
        "load_average_1m_start": started, "load_average_1m_end": os.getloadavg()[0],
        "after_matmul_precision": train_config.matmul_precision,
        "before_samples_per_s": before, "after_samples_per_s": after, "speedup_after": after / before,
        "runs_samples_per_s": {k: [row["samples_per_s"] for row in v] for k, v in runs.items()},
        "curve_before_vs_after": compare_curves(runs["before"][0]["curve"], runs["after"][0]["curve"]),
        "curve_before_repeat": compare_curves(runs["before"][0]["curve"], runs["before"][-1]["curve"]),
        "curves": {"before": runs["before"][0]["curve"], "after": runs["after"][0]["curve"]},
    }
    if other_seed is not None:  # what "within noise" means: the same code, another seed
        report["curve_before_vs_before_next_seed"] = compare_curves(runs["before"][0]["curve"], other_seed["curve"])
        report["curves"]["before_next_seed"] = other_seed["curve"]
    if ddp is not None:
        report.update({"after_ddp2_samples_per_s": ddp["samples_per_s"],
                       "speedup_after_ddp2": ddp["samples_per_s"] / before,
                       "after_ddp2_wall_s_with_startup": ddp["wall_s_with_startup"],
                       "curve_before_vs_ddp2": compare_curves(runs["before"][0]["curve"], ddp["curve"])})
        report["curves"]["after_ddp2"] = ddp["curve"]
    samples = RECIPE_STEPS * recipe["train"]["batch_size"]
    report["recipe_steps"] = RECIPE_STEPS
    for key in ("before", "after", "after_ddp2"):
        value = report.get(f"{key}_samples_per_s")
        if value:
            report[f"{key}_recipe_training_minutes"] = samples / value / 60
    recipe = "after_ddp2" if report.get("after_ddp2_samples_per_s") else "after"
    report["recipe_variant"] = recipe
    report["recipe_training_minutes"] = report[f"{recipe}_recipe_training_minutes"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    summary = {k: v for k, v in report.items() if k != "curves"}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
