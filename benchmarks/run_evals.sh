#!/usr/bin/env bash
# The shipped policy's evaluations (issue targets: 200 episodes each, seeds never used in
# training), two at a time on a 2-core machine (each evaluation uses one torch thread; the
# latency model counts ticks, so load does not change the results). JSON into
# benchmarks/results/. About 25 minutes when the policy succeeds (failures run the full 20 s).
#   benchmarks/run_evals.sh [CHECKPOINT] [EPISODES] [ABLATION_EPISODES]
# (the shipped results: 200 episodes for the targets, 60 for the queue / ideal ablations)
# LATENCY_TICKS=N fixes the latency instead of measuring it (when the machine is busy, the
# measured latency would be too long).
set -euo pipefail
cd "$(dirname "$0")/.."
ARM_ACT=${ARM_ACT:-.venv/bin/arm-act}
CKPT=${1:-checkpoints/default}
N=${2:-200}
NA=${3:-60}
OUT=benchmarks/results
mkdir -p "$OUT"
LAT=()
if [[ -n "${LATENCY_TICKS:-}" ]]; then LAT=(--latency-ticks "$LATENCY_TICKS"); fi
ev() { "$ARM_ACT" eval --policy "$CKPT" --threads 1 --json "${LAT[@]}" "$@"; }
ev --episodes "$N" --seed 100000 --blocks 2-5 --out "$OUT/policy_2-5.json" > /dev/null &
ev --episodes "$N" --seed 200000 --blocks 6 --out "$OUT/policy_6.json" > /dev/null
wait
ev --episodes "$NA" --seed 100000 --blocks 2-5 --execution queue --out "$OUT/policy_2-5_queue.json" > /dev/null &
ev --episodes "$NA" --seed 100000 --blocks 2-5 --ideal --out "$OUT/policy_2-5_ideal.json" > /dev/null
wait
for f in policy_2-5 policy_6 policy_2-5_queue policy_2-5_ideal; do
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"{sys.argv[2]:18s} {d['successes']}/{d['episodes']}  {d['success_rate']:.1%}  CI {d['ci95'][0]:.1%}-{d['ci95'][1]:.1%}\")" "$OUT/$f.json" "$f"
done
