#!/usr/bin/env bash
# The full benchmark: benchmarks/results.json (the faster backend), results_torch.json
# (torch eager) and benchmarks/RESULTS.md from both. About 5 minutes; run it on a quiet
# machine (nothing else busy: the figures are CPU timings on 2 cores).
#   benchmarks/run_bench.sh [extra arm-act bench options, e.g. --checkpoint DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
"$PY" -m arm_act.cli bench --backend auto --out benchmarks/results.json "$@"
"$PY" -m arm_act.cli bench --backend torch --out benchmarks/results_torch.json "$@"
"$PY" benchmarks/results_md.py benchmarks/results.json benchmarks/results_torch.json > benchmarks/RESULTS.md
echo "wrote benchmarks/RESULTS.md"
