#!/bin/bash
# The head-count ablation on the relation family (docs/training.md, "One head or several"):
# the same data, width (128), steps and seed; only the number of attention heads differs
# (1 against the default 4). Resumable: every finished step leaves a file and is skipped.
#   benchmarks/heads/run.sh OUT [SEEDS...]     (default seeds: 0)
# VARIANT=place adds the place head (place.json) and names its runs *_place, beside the others;
# VARIANT=place_loss trains the place head without conditioning the action queries on it.
# VARIANT=place_ft adds the place head to the trained network of the same seed and head count
# (trained first, without it, if missing) and fine-tunes from it (place.json with steps_ft.json:
# 4,000 steps, lr 2e-4), so the place is learned by a network that already finds the named block.
# VARIANT=steps_ft is its control: the same fine-tune (steps_ft.json) without the place head.
# HEADS="4" runs one head count only (default: "1 4").
set -eu
OUT=${1:?usage: run.sh OUT [SEEDS...]}; shift
SEEDS=${*:-0}
HEADS=${HEADS:-1 4}
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd)
ARM=${ARM_ACT:-arm-act}
mkdir -p "$OUT"
EXTRA=(); SUFFIX=""
if [ -n "${VARIANT:-}" ]; then EXTRA=("$HERE/${VARIANT}.json"); SUFFIX="_${VARIANT}"; fi
[ "${VARIANT:-}" = place_ft ] && EXTRA=("$HERE/place.json" "$HERE/steps_ft.json")
FINETUNE=""; case "${VARIANT:-}" in *_ft) FINETUNE=1 ;; esac
# 800 expert demonstrations of the relation family, seeds no evaluation uses.
if [ ! -e "$OUT/demos.done" ]; then
    $ARM collect --task relation --episodes 800 --seed 610000 --blocks 2-5 --workers 2 --resume --out "$OUT/demos"
    touch "$OUT/demos.done"
fi
# train_eval RUN INIT CONFIGS...: train RUN (from INIT's weights when INIT is set), then evaluate it.
train_eval() {
    local run=$1 init=$2; shift 2
    local from=(); [ -n "$init" ] && from=(--init "$init")
    if [ ! -s "$run/ckpt/metrics.json" ]; then
        $ARM train --data "$OUT/demos" --out "$run/ckpt" --cache "$OUT/cache" --seed "$seed" --nproc-per-node 2 \
            --config "$ROOT/config/train_default.json" "$HERE/train_relation.json" "$@" "${from[@]}" \
            > "$run.train.log" 2>&1 || { mkdir -p "$run"; tail -20 "$run.train.log"; exit 1; }
    fi
    # The network alone on 100 relation episodes from seeds no training used.
    if [ ! -s "$run/eval_relation.json" ]; then
        $ARM eval --policy "$run/ckpt" --task relation --episodes 100 --seed 100000 --blocks 2-5 \
            --latency-ticks 1 --workers 2 --no-assist --out "$run/eval_relation.json" > "$run/eval_relation.log" 2>&1
    fi
    echo "== $(date +%T) $run"
}
for seed in $SEEDS; do
    for heads in $HEADS; do
        run="$OUT/heads${heads}_seed${seed}"
        if [ -n "$FINETUNE" ]; then
            train_eval "$run" "" "$HERE/heads_${heads}.json"
            train_eval "$run$SUFFIX" "$run/ckpt" "$HERE/heads_${heads}.json" "${EXTRA[@]}"
        else
            train_eval "$run$SUFFIX" "" "$HERE/heads_${heads}.json" "${EXTRA[@]}"
        fi
    done
done
echo "done $(date +%T)"
