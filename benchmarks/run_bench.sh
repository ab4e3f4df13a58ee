#!/usr/bin/env bash
# The full benchmark, before and after the optimisations, and benchmarks/RESULTS.md from both.
#   before: torch eager on 2 intra-op threads (what a user gets by default from PyTorch)
#   after:  the configuration we ship (config/policy.yaml: 1 thread) with the faster backend
# About 5 minutes; run it on a quiet machine (the figures are CPU timings on 2 cores).
#   benchmarks/run_bench.sh [extra arm-act bench options, e.g. --checkpoint DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
"$PY" -m arm_act.cli bench --backend torch --threads 2 --label before --out benchmarks/results_before.json "$@"
"$PY" -m arm_act.cli bench --backend auto --label after --out benchmarks/results.json "$@"
"$PY" benchmarks/results_md.py benchmarks/results_before.json benchmarks/results.json > benchmarks/RESULTS.md
echo "wrote benchmarks/RESULTS.md"
