"""Peak resident memory of `arm-act train` against the number of episodes (the training cache
is memory-mapped, so it should not grow with the dataset).

    python benchmarks/train_memory.py --bags data/demos20 --copies 1 4 [--steps 20]
        [--out benchmarks/results/train_memory.json] [--code-root DIR]

For each entry of --copies, a dataset of that many copies of every bag under --bags is laid
out (hard links, so each copy is its own bag with its own cache entry) and `arm-act train`
runs on it twice in a fresh process each: with an empty cache (every bag decoded) and with
the warm cache (read memory-mapped). The peak RSS of each run is the child's ru_maxrss
(os.wait4). --code-root runs another checkout's code (e.g. a worktree of an older commit)
for a before/after comparison. The slope is (peak at the largest - peak at the smallest) /
(episodes between them).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lay_out(bags: list[Path], copies: int, where: Path) -> Path:
    for k in range(copies):
        for bag in bags:
            target = where / f"copy{k}" / bag.name
            shutil.copytree(bag, target, copy_function=os.link)
    return where


def peak_rss_mb(command: list[str], env: dict) -> tuple[float, float]:
    """(peak RSS MB, wall s) of one child process."""
    started = time.monotonic()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}:\n{err[-3000:]}")
    return usage.ru_maxrss / 1024, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bags", type=Path, required=True, help="a directory of bags (e.g. from arm-act collect)")
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--code-root", type=Path, default=ROOT, help="the checkout whose arm_act runs")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "train_memory.json")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from arm_act.bags import find_bags

    bags = find_bags([args.bags])
    code = args.code_root.resolve()
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    runner = ("import sys; sys.path.insert(0, sys.argv.pop(1)); from arm_act.cli.main import main; "
              "sys.exit(main(sys.argv[1:]))")
    rows = []
    with tempfile.TemporaryDirectory(prefix="arm_act_memory_") as tmp:
        for copies in args.copies:
            data = lay_out(bags, copies, Path(tmp) / f"data{copies}")
            cache = Path(tmp) / f"cache{copies}"
            row = {"episodes": copies * len(bags), "bags_mb": round(sum(
                f.stat().st_size for f in data.rglob("*") if f.is_file()) / 2**20, 1)}
            for run in ("cold_cache", "warm_cache"):
                out = Path(tmp) / f"out{copies}_{run}"
                command = [sys.executable, "-c", runner, str(code), "train", "--data", str(data), "--out", str(out),
                           "--cache", str(cache), "--steps", str(args.steps), "--no-resume",
                           "--config", "threads=1", "val_every=100000", "checkpoint_every=100000"]
                row[f"{run}_peak_rss_mb"], row[f"{run}_wall_s"] = (round(v, 1) for v in peak_rss_mb(command, env))
            row["cache_mb"] = round(sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) / 2**20, 1)
            rows.append(row)
            print(row, flush=True)
    first, last = rows[0], rows[-1]
    span = last["episodes"] - first["episodes"]
    report = {"code": str(code), "steps": args.steps, "rows": rows,
              "slope_mb_per_episode": {run: round((last[f"{run}_peak_rss_mb"] - first[f"{run}_peak_rss_mb"]) / span, 3)
                                       for run in ("cold_cache", "warm_cache")} if span else None,
              "load_1min": round(os.getloadavg()[0], 2)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["slope_mb_per_episode"]), f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
