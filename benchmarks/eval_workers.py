"""What `arm-act eval --workers 2` saves: in-process evaluation episodes of the shipped
checkpoint on 1 process and on 2, alternating, in this one process.

    python benchmarks/eval_workers.py [--episodes 40] [--repeats 3] [--out FILE.json]

Each round is arm_act.eval.evaluate.evaluate, the code `arm-act eval` runs, with one torch
thread per process and the latency fixed at 1 tick (as the pipeline's evaluations run), so
the 2-process rounds include spawning the workers and loading the checkpoint in each. Every
round must give the same records as the first 1-process round, or the script fails. Run it
on a quiet machine: the two workers need both cores.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _shown(path: Path) -> str:
    """A path inside the repository relative to it (results carry no machine's paths)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    from arm_act.eval.evaluate import EvalConfig, evaluate
    from arm_act.eval.in_process import PolicySettings

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", type=Path, default=ROOT / "checkpoints" / "default")
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--seed", type=int, default=100000)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of each, alternating; medians reported")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    settings = PolicySettings(threads=1, latency_ticks=1)
    walls: dict[int, list[float]] = {1: [], 2: []}
    reference = None
    for _ in range(args.repeats):
        for workers in (1, 2):
            summary = evaluate(EvalConfig(policy=args.policy, episodes=args.episodes, seed=args.seed,
                                          settings=settings, workers=workers))
            if reference is None:
                reference = summary["results"]
            elif summary["results"] != reference:
                raise SystemExit(f"workers={workers} gave other records than 1 process")
            walls[workers].append(summary["wall_time_s"])
            print(f"workers={workers}: {args.episodes} episodes in {summary['wall_time_s']:.1f} s "
                  f"({summary['successes']} succeeded)", flush=True)
    one, two = statistics.median(walls[1]), statistics.median(walls[2])
    result = {
        "policy": _shown(args.policy), "episodes": args.episodes, "seed": args.seed, "threads_per_process": 1,
        "wall_s": {"1": walls[1], "2": walls[2]}, "median_s": {"1": one, "2": two},
        "speedup_median": round(one / two, 2), "speedup_worst": round(min(walls[1]) / max(walls[2]), 2),
        "episodes_per_min_median": {"1": round(60 * args.episodes / one, 1), "2": round(60 * args.episodes / two, 1)},
        "same_records": True, "cpus": os.cpu_count(), "load_1min_end": round(os.getloadavg()[0], 2),
    }
    print(f"median {one:.1f} s on 1 process, {two:.1f} s on 2: {result['speedup_median']}x "
          f"(worst pairing {result['speedup_worst']}x)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
