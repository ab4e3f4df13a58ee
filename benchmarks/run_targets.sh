#!/usr/bin/env bash
# A checkpoint against the success targets of docs/training.md ("The network alone"), each
# evaluation a JSON file in OUT_DIR. The network alone (the default of `arm-act eval` and of
# policy_node): 2-5 and 6 blocks (200 episodes each), the seven robustness worlds with the
# scripted expert beside it (ROBUSTNESS_EPISODES per world, default 200), cameras at
# 10/25/50 Hz (200 episodes from seed 600000). With ASSIST=1 the same 2-5 / 6 blocks and
# robustness rows are also run with policy_node's hand-written assist (assist_*.json), for
# the table "alone / with the assist / expert". LIVE=1 adds the live nodes against in process
# on 100 consecutive seeds (live_vs_in_process.json, about 9 minutes on a quiet machine).
# In-process episodes on 2 local workers, one torch thread each, latency fixed at 1 tick
# (counted in ticks, so the machine's load does not change the results). A file that
# exists is kept: rerun to finish an interrupted run.
#   benchmarks/run_targets.sh [CHECKPOINT] [OUT_DIR]
# EVAL_ARGS is added to every evaluation (e.g. EVAL_ARGS="--retry policy").
# EXPERT_FROM=DIR skips the expert's robustness runs and takes its column of the table from
# DIR/robustness.json, a run of the same episodes (the expert does not depend on the checkpoint).
set -uo pipefail
cd "$(dirname "$0")/.."
ARM_ACT=${ARM_ACT:-.venv/bin/arm-act}
CKPT=${1:-checkpoints/default}
OUT=${2:-benchmarks/results/targets}
EPISODES=${ROBUSTNESS_EPISODES:-200}
mkdir -p "$OUT"
read -r -a EXTRA <<< "${EVAL_ARGS:-}"
ev() { "$ARM_ACT" eval --policy "$CKPT" --threads 1 --latency-ticks 1 "${EXTRA[@]}" "$@"; }
run() {
  local name=$1; shift
  if [[ -f "$OUT/$name.json" ]]; then echo "kept   $name"; return; fi
  echo "== $name ($(date +%T))"
  ev --workers 2 "$@" --out "$OUT/$name.json.part" > "$OUT/$name.log" 2>&1 \
    && mv "$OUT/$name.json.part" "$OUT/$name.json" && rm -f "$OUT/$name.log" \
    || { echo "$name failed, see $OUT/$name.log"; return 1; }
}
run policy_2-5 --episodes 200 --seed 100000 --blocks 2-5
run policy_6 --episodes 200 --seed 200000 --blocks 6
for rate in 10 25 50; do run camera_$rate --episodes 200 --seed 600000 --blocks 2-5 --camera-rate $rate; done
NO_EXPERT=(); TABLE_ARGS=()
if [[ -n "${EXPERT_FROM:-}" ]]; then NO_EXPERT=(--no-expert); TABLE_ARGS=(--expert-from "$EXPERT_FROM"); fi
run robustness --robustness all --episodes "$EPISODES" --seed 400000 "${NO_EXPERT[@]}"
if [[ "${ASSIST:-0}" == 1 ]]; then
  run assist_2-5 --episodes 200 --seed 100000 --blocks 2-5 --assist
  run assist_6 --episodes 200 --seed 200000 --blocks 6 --assist
  run assist_robustness --robustness all --episodes "$EPISODES" --seed 400000 --no-expert --assist
fi
for table in robustness assist_robustness; do
  if [[ -f "$OUT/$table.json" ]]; then
    "${PY:-.venv/bin/python}" -c "import json, sys; from arm_act.eval.robustness import markdown_table; \
print(markdown_table(json.load(open(sys.argv[1]))))" "$OUT/$table.json" > "$OUT/$table.md"
  fi
done
if [[ "${LIVE:-0}" == 1 && ! -f "$OUT/live_vs_in_process.json" ]]; then
  echo "== live ($(date +%T))"
  ev --live --compare-in-process --episodes 100 --seed 100000 --out "$OUT/live_vs_in_process.json"
fi
"${PY:-.venv/bin/python}" benchmarks/targets_table.py "$OUT" "${TABLE_ARGS[@]}"
