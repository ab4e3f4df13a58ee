"""The re-grasp count over one results directory of benchmarks/run_targets.sh (with ASSIST=1): of the
episodes whose first grasp closed on nothing, how many still succeeded.

    python benchmarks/regrasp_count.py benchmarks/results/pipeline_shipped

It adds up the `regrasp` summary of every evaluation run with the defaults (aim correction,
re-grasp reflex, colour balance): policy_2-5, policy_6, camera_*.json, camera_200/*.json and
the policy's side of each robustness world. The runs with something switched off
(no_aim_*, queue_*, no_balance/) and the live comparison are left out.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

LEFT_OUT = ("no_aim", "queue", "live_vs_in_process", "aim_cost")


def counts(directory: Path) -> list[tuple[str, int, int]]:
    """(evaluation, first grasps missed, of those succeeded), in a stable order."""
    rows = []
    files = sorted(directory.glob("*.json")) + sorted((directory / "camera_200").glob("*.json"))
    for path in files:
        if path.stem.startswith(LEFT_OUT):
            continue
        data = json.loads(path.read_text())
        name = str(path.relative_to(directory).with_suffix(""))
        if "rows" in data:  # a robustness table: the policy's side of each world
            for row in data["rows"]:
                regrasp = (row.get("policy") or {}).get("regrasp")  # absent in an expert-only table
                if regrasp:
                    rows.append((f"{name}: {row['variant']}", regrasp["missed_first_grasp"],
                                 regrasp["succeeded_after_miss"]))
        elif data.get("regrasp"):
            rows.append((name, data["regrasp"]["missed_first_grasp"], data["regrasp"]["succeeded_after_miss"]))
    return rows


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python benchmarks/regrasp_count.py RESULTS_DIR (a directory of run_targets.sh results)",
              file=sys.stderr)
        return 2
    rows = counts(Path(argv[0]))
    for name, missed, recovered in rows:
        if missed:
            print(f"{name:32s} {recovered} of {missed}")
    missed = sum(r[1] for r in rows)
    recovered = sum(r[2] for r in rows)
    share = f" ({100 * recovered / missed:.1f}%)" if missed else ""
    print(f"{'all':32s} {recovered} of {missed}{share} over {len(rows)} evaluations")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
