"""The table of benchmarks/run_transport.sh: one row per run, in the order they ran.

    python benchmarks/transport_table.py benchmarks/results/transport/*.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = (("control_period_wall_p50_ms", "command period p50 ms (wall)"), ("control_period_wall_p99_ms", "p99 ms"),
           ("missed_ticks_wall", "missed ticks"), ("control_period_p99_ms", "period p99 ms (sim)"),
           ("obs_to_command_ms_p50", "camera to command p50 ms"), ("obs_to_command_ms_p99", "p99 ms"))


def _cell(value) -> str:
    return "" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def main(paths: list[str]) -> int:
    runs = [(Path(p).stem, json.loads(Path(p).read_text())) for p in paths]
    runs.sort(key=lambda run: (run[0].split("_")[-1], run[0]))  # round, then transport
    print("| run | " + " | ".join(title for _, title in COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for name, report in runs:
        print(f"| {name} | " + " | ".join(_cell(report.get(key)) for key, _ in COLUMNS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
