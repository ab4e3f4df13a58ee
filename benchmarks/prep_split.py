"""What splitting the grounding layouts between data-parallel processes saves.

    python benchmarks/prep_split.py [--layouts 600] [--processes 2] [--out FILE.json]

Starts `--processes` processes at once, as torchrun starts the ranks of a training run,
twice: first each renders every layout (what every rank did before the split), then each
renders its share into a shared cache and reads the others' (arm_act.common.shares). The
wall time of each round is from the first start to the last exit. Run it on a quiet
machine: the two rounds share the CPUs with anything else that runs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = """
import sys, time
import numpy as np
from arm_act.data.grounding import render_grounding_frames
from arm_act.data.training import sim_config_for
from arm_act.policy.config import PolicyConfig
from arm_act.sim.robot import HOME
n, rank, size, cache = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
pose = HOME.copy(); pose[:7] += np.array([0.3, 0.2, -0.1, 0.2, 0.0, -0.2, 0.1])
started = time.time()
frames = render_grounding_frames(n, 1_000_000, sim_config_for(PolicyConfig()), poses=pose[None].astype(np.float32),
                                 borrowed=0.5, cache_dir=cache if cache != "-" else None, progress=False,
                                 share=(rank, size))
assert len(frames) == n
print(started, time.time())
"""


def _round(n: int, processes: int, cache: str) -> float:
    """From the first process's start of rendering to the last one's end (the imports
    before, ~5 s a process, are left out)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(n), str(r), str(processes), cache], env=env,
                                 stdout=subprocess.PIPE, text=True) for r in range(processes)]
    spans = []
    for child in children:
        out, _ = child.communicate()
        if child.returncode:
            raise SystemExit("a rendering process failed")
        spans.append([float(x) for x in out.split()[-2:]])
    return max(end for _, end in spans) - min(start for start, _ in spans)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layouts", type=int, default=600)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of each kind, alternating; medians reported")
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    args = parser.parse_args(argv)
    each, split = [], []
    for _ in range(args.repeats):
        each.append(_round(args.layouts, args.processes, "-"))  # no cache: every process renders all
        with tempfile.TemporaryDirectory() as cache:
            split.append(_round(args.layouts, args.processes, cache))
    result = {"layouts": args.layouts, "processes": args.processes, "cpus": len(os.sched_getaffinity(0)),
              "each_renders_all_s": [round(t, 2) for t in each], "split_s": [round(t, 2) for t in split],
              "median_each_renders_all_s": round(float(np.median(each)), 2),
              "median_split_s": round(float(np.median(split)), 2),
              "speedup": round(float(np.median(each) / np.median(split)), 2)}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
