#!/usr/bin/env bash
# The aim correction's evaluations (docs/training.md, "Aim correction"), each a JSON file in
# benchmarks/results/aim/: the issue's targets with the correction (200 episodes, 2-5 and 6
# blocks), the same 2-5 seeds without it (--no-aim, side by side), cameras at 10/25/50 Hz,
# the chunk queue, and the robustness table (policy and expert, 7 worlds x 50 episodes).
# In-process episodes on 2 local workers, one torch thread each, latency 1 tick (the
# measured latency here; counted in ticks, so load does not change the results). About
# 30 minutes on 2 cores. A file that exists is kept: rerun to finish an interrupted run.
#   benchmarks/run_aim.sh [CHECKPOINT] [OUT_DIR]
# EVAL_ARGS is added to every evaluation (e.g. EVAL_ARGS="--retry policy": re-grasps by the
# chunks instead of the reflex, the comparison in benchmarks/results/regrasp/).
# ROBUSTNESS_EPISODES (default 50) sets the episodes of each robustness world.
# LIVE=1 adds the live nodes against in process on 100 consecutive seeds (~12 min more,
# on a quiet machine): live_vs_in_process.json.
set -uo pipefail
cd "$(dirname "$0")/.."
ARM_ACT=${ARM_ACT:-.venv/bin/arm-act}
CKPT=${1:-checkpoints/default}
OUT=${2:-benchmarks/results/aim}
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
run no_aim_2-5 --episodes 200 --seed 100000 --blocks 2-5 --no-aim
for rate in 10 25 50; do run camera_$rate --episodes 60 --seed 500000 --blocks 2-5 --camera-rate $rate; done
run queue_2-5 --episodes 60 --seed 100000 --blocks 2-5 --execution queue
run robustness --robustness all --episodes "${ROBUSTNESS_EPISODES:-50}" --seed 400000
if [[ -f "$OUT/robustness.json" ]]; then
  "${PY:-.venv/bin/python}" -c "import json, sys; from arm_act.eval.robustness import markdown_table; \
print(markdown_table(json.load(open(sys.argv[1]))))" "$OUT/robustness.json" > "$OUT/robustness.md"
fi
if [[ "${LIVE:-0}" == 1 && ! -f "$OUT/live_vs_in_process.json" ]]; then
  echo "== live ($(date +%T))"
  ev --live --compare-in-process --episodes 100 --seed 100000 --out "$OUT/live_vs_in_process.json"
fi
for f in "$OUT"/*.json; do
  python3 - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
name = sys.argv[1].rsplit("/", 1)[-1][:-5]
if "successes" in d:
    lo, hi = d["ci95"]
    print(f"{name:22s} {d['successes']}/{d['episodes']}  {d['success_rate']:.1%}  CI {lo:.1%}-{hi:.1%}")
PY
done
