#!/usr/bin/env bash
# The cost of the nodes' DDS transport (arm_act/ros/transport.py): the live loop over DDS with
# shared memory (rmw_fastrtps's own LOCALHOST setting, ARM_ACT_DDS_TRANSPORT=shm) and with
# UDP over loopback (the default), alternated ROUNDS times in one run on a quiet machine.
# Each run: `arm-act bench --ros-only` for SECONDS (default 60) after its warm-up; the table
# gives the control period p99 and the camera-to-command latency as the probe sees them.
#
#   benchmarks/run_transport.sh                  # ~6 minutes: shm, udp, shm, udp
#   SECONDS_EACH=10 ROUNDS=1 benchmarks/run_transport.sh   # smoke
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SECONDS_EACH=${SECONDS_EACH:-60}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-benchmarks/results/transport}
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
mkdir -p "$OUT"
for round in $(seq 1 "$ROUNDS"); do
    for transport in shm udp; do
        echo "== round $round: $transport"
        ARM_ACT_DDS_TRANSPORT=$transport "$PY" -m arm_act.cli bench --ros-only --ros-seconds "$SECONDS_EACH" \
            --label "transport_${transport}_${round}" --out "$OUT/${transport}_${round}.json" > /dev/null
    done
done
"$PY" benchmarks/transport_table.py "$OUT"/*.json
