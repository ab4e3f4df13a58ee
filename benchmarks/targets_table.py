"""The table of benchmarks/run_targets.sh's results: one row per evaluation, the network alone
beside the network with the assist and the scripted expert where they ran, with the first
grasp's horizontal error (p50 / p90, cm) and the first grasps that closed on nothing.

    python benchmarks/targets_table.py RESULTS_DIR
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def _cell(summary: dict | None) -> str:
    if summary is None:
        return "-"
    return f"{summary['successes']}/{summary['episodes']}"


def _grasp(summary: dict | None) -> str:
    g = (summary or {}).get("grasp_precision")
    if not g or g.get("xy_cm_p50") is None:
        return "-"
    return f"{g['xy_cm_p50']:.2f} / {g['xy_cm_p90']:.2f} cm, {g['closed_on_nothing']} on nothing"


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def rows(out: Path) -> list[tuple[str, dict | None, dict | None, dict | None]]:
    """(name, alone, with the assist, expert) summaries per evaluation found in `out`."""
    found = []
    for name, alone, assist in (("2-5 blocks", "policy_2-5", "assist_2-5"), ("6 blocks", "policy_6", "assist_6"),
                                ("cameras 10 Hz", "camera_10", None), ("cameras 25 Hz", "camera_25", None),
                                ("cameras 50 Hz", "camera_50", None)):
        a = _load(out / f"{alone}.json")
        if a is not None:
            found.append((name, a, _load(out / f"{assist}.json") if assist else None, None))
    table, assisted = _load(out / "robustness.json"), _load(out / "assist_robustness.json")
    if table is not None:
        for variant, who in table["summaries"].items():
            helped = (assisted or {}).get("summaries", {}).get(variant, {}).get("policy")
            found.append((f"world: {variant}", who.get("policy"), helped, who.get("expert")))
    return found


def markdown(out: Path) -> str:
    lines = ["| evaluation | network alone | alone: first grasp p50 / p90, closed on nothing | with the assist "
             "| scripted expert |", "|---|---|---|---|---|"]
    for name, alone, assist, expert in rows(out):
        lines.append(f"| {name} | {_cell(alone)} | {_grasp(alone)} | {_cell(assist)} | {_cell(expert)} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python benchmarks/targets_table.py RESULTS_DIR (a directory of run_targets.sh results)",
              file=sys.stderr)
        return 2
    text = markdown(Path(argv[0]))
    (Path(argv[0]) / "targets.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
