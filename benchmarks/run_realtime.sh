#!/usr/bin/env bash
# The real-time measurements, in one run on a quiet machine (2 cores):
#   1. the live loop over DDS for ROS_SECONDS (default 600) with 10 Hz cameras
#      -> benchmarks/results/realtime_10hz.json
#   2. the same for INFER_SECONDS (default 60) with 50 Hz cameras: a camera pair, and an
#      inference, on every control tick -> benchmarks/results/realtime_50hz.json
#   then (COMPARE_SECONDS, default 60; 0 skips it) the 10 Hz run without the GIL/heap/SCHED_FIFO process
#      settings of arm_act/common/realtime.py -> benchmarks/results/realtime_10hz_untuned.json
#   3. training throughput, the shipped recipe before and after, same batch, interleaved on a
#      real dataset of 20 expert episodes (collected into a temporary directory)
#      -> benchmarks/results/train_speed.json
# sim_node and policy_node run as separate processes, as launch runs them (arm-act bench
# --arrangement processes), with the yaml files' settings (SCHED_FIFO 50, lock_memory true;
# --lock-memory no as an extra argument measures them unlocked). Each JSON holds: control periods on both clocks (p50/p99),
# missed ticks on both clocks, camera pair -> first command from it (p50/p99), the
# real-time factor, and CPU seconds per sim second of each process and of its busiest threads.
#
#   benchmarks/run_realtime.sh                               # ~26 minutes (10 + 1 + 1 + ~12)
#   ROS_SECONDS=10 INFER_SECONDS=10 COMPARE_SECONDS=10 TRAIN_STEPS=20 TRAIN_EPISODES=6 benchmarks/run_realtime.sh  # smoke
# Extra arguments go to both `arm-act bench` runs (e.g. --backend torch).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
ROS_SECONDS=${ROS_SECONDS:-600}
INFER_SECONDS=${INFER_SECONDS:-60}
TRAIN_STEPS=${TRAIN_STEPS:-300}
TRAIN_EPISODES=${TRAIN_EPISODES:-20}
BACKEND=${BACKEND:-onnx}
OUT=${OUT:-benchmarks/results}
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
mkdir -p "$OUT"
echo "== 1/3: ${ROS_SECONDS} s, cameras 10 Hz"
"$PY" -m arm_act.cli bench --ros-only --ros-seconds "$ROS_SECONDS" --camera-rate 10 --backend "$BACKEND" \
    --label "realtime_10hz" --out "$OUT/realtime_10hz.json" "$@" > /dev/null
"$PY" -m arm_act.bench.realtime_summary "$OUT/realtime_10hz.json"
echo "== 2/3: ${INFER_SECONDS} s, cameras 50 Hz (inference on every camera pair)"
"$PY" -m arm_act.cli bench --ros-only --ros-seconds "$INFER_SECONDS" --camera-rate 50 --backend "$BACKEND" \
    --label "realtime_50hz" --out "$OUT/realtime_50hz.json" "$@" > /dev/null
"$PY" -m arm_act.bench.realtime_summary "$OUT/realtime_50hz.json"
if [ "${COMPARE_SECONDS:-60}" != 0 ]; then
    echo "== side by side: ${COMPARE_SECONDS:-60} s, cameras 10 Hz, without the process settings and real-time scheduling (ARM_ACT_REALTIME_TUNING=0)"
    ARM_ACT_REALTIME_TUNING=0 "$PY" -m arm_act.cli bench --ros-only --ros-seconds "${COMPARE_SECONDS:-60}" \
        --camera-rate 10 --backend "$BACKEND" --label "realtime_10hz_untuned" \
        --out "$OUT/realtime_10hz_untuned.json" "$@" > /dev/null
    "$PY" -m arm_act.bench.realtime_summary "$OUT/realtime_10hz_untuned.json"
fi
echo "== 3/3: training throughput (${TRAIN_STEPS} steps per variant, ${TRAIN_EPISODES} episodes)"
DATA=$(mktemp -d /tmp/arm_act_train_speed_XXXXXX)
trap 'rm -rf "$DATA"' EXIT
"$PY" -m arm_act.cli collect --episodes "$TRAIN_EPISODES" --seed 500 --out "$DATA/bags" > /dev/null
"$PY" -m arm_act.bench.train_speed --data "$DATA/bags" --cache "$DATA/cache" --steps "$TRAIN_STEPS" \
    --out "$OUT/train_speed.json"
