#!/usr/bin/env bash
# One takeover round on top of a checkpoint (default checkpoints/default), then a 3,000-step
# fine-tune from it on the round's data, the two 200-episode evaluations and (with
# ROBUSTNESS=1) the robustness table. Every stage resumes (`--resume`, `arm-act train`
# continues its train_state), so rerunning the script continues where it stopped.
#   benchmarks/run_round.sh ROUND [CHECKPOINT] [OUT]            # OUT default runs/ROUND
# ROUND (docs/training.md, "Takeover rounds aimed at the grasp"):
#   grasp             the expert takes over as the policy starts to close the gripper and
#                     corrects the aim (1,000 episodes, seeds 360000+), with 300 time-handover
#                     episodes and 600 fresh demonstrations: ~65 min on 2 cores
#   regrasp-no-world  the expert takes over where the policy's grasp closed on nothing
#                     (3,000 episodes, seeds 320000+ and 340000+), time handovers, demonstrations
#   regrasp           the same plus 150 demonstrations in each of the lighting, camera,
#                     distractors and push worlds (seeds 700000+): ~75 min
#   control           no new kind of episode: only the time handovers and demonstrations
# Other seeds: 330000+ (time handover), 0-599 (demonstrations). None is an evaluation seed
# (100000+, 200000+, 400000+, 500000+).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUND=${1:?usage: benchmarks/run_round.sh grasp|regrasp-no-world|regrasp|control [CHECKPOINT] [OUT]}
PY=${PY:-.venv/bin/python}
CKPT=${2:-checkpoints/default}
R=${3:-runs/$ROUND}
mkdir -p "$R"
stamp() { echo "== $(date -u +%H:%M:%S) $*"; }
collect() { "$PY" -m arm_act.cli collect --blocks 2-5 --workers 2 --resume --json "$@" > /dev/null; }
data=()
case "$ROUND" in
  grasp)
    stamp "grasp handovers"; collect --episodes 1000 --seed 360000 --policy "$CKPT" --handover grasp --out "$R/grasp"
    data+=("$R/grasp") ;;
  regrasp|regrasp-no-world)
    stamp "misses"; collect --episodes 2000 --seed 320000 --policy "$CKPT" --handover miss --out "$R/miss"
    collect --episodes 1000 --seed 340000 --policy "$CKPT" --handover miss --out "$R/miss2"
    data+=("$R/miss" "$R/miss2") ;;  # training leaves out, unread, the ~89% the expert never took over in
  control) ;;
  *) echo "unknown ROUND $ROUND (grasp, regrasp-no-world, regrasp, control)" >&2; exit 2 ;;
esac
stamp "takeover"; collect --episodes 300 --seed 330000 --policy "$CKPT" --handover 0.5-6 --out "$R/takeover"
stamp "demos";    collect --episodes 400 --seed 0 --out "$R/demos_plain"
collect --episodes 200 --seed 400 --perturb 0.3 --out "$R/demos_perturbed"
data+=("$R/takeover" "$R/demos_plain" "$R/demos_perturbed")
if [ "$ROUND" = regrasp ]; then
  s=700000
  for w in lighting camera distractors push; do
    stamp "world $w"; collect --episodes 150 --seed "$s" --world "$w" --out "$R/world_$w"
    data+=("$R/world_$w")
    s=$((s + 1000))
  done
fi
stamp "train"
OMP_NUM_THREADS=1 "$PY" -m arm_act.cli train --data "${data[@]}" --init "$CKPT" --out "$R/ckpt" --cache "$R/cache" \
    --device cpu --nproc-per-node 2 --config config/train_default.json steps=3000 lr=2e-4 warmup_steps=100 \
    hold_after_end=true threads=1 > "$R/train.log" 2>&1
ev() { "$PY" -m arm_act.cli eval --policy "$R/ckpt" --threads 1 --latency-ticks 1 --json "$@" > /dev/null; }
stamp "eval"      # the two evaluations side by side, one core each
ev --episodes 200 --seed 100000 --blocks 2-5 --out "$R/eval_2-5.json" &
ev --episodes 200 --seed 200000 --blocks 6 --out "$R/eval_6.json"
wait
if [ "${ROBUSTNESS:-0}" = 1 ]; then
  stamp "robustness"; ev --robustness all --no-expert --episodes 50 --seed 400000 --blocks 2-5 --out "$R/robustness.json"
fi
stamp "done"
