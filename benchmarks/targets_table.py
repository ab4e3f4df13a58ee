"""The table of benchmarks/run_targets.sh's results: one row per evaluation, the network alone
beside the network with the assist and the scripted expert where they ran, with the first
grasp's horizontal error (p50 / p90, cm) and the first grasps that closed on nothing.

    python benchmarks/targets_table.py RESULTS_DIR [--expert-from DIR]

--expert-from takes the scripted expert's column from DIR/robustness.json where RESULTS_DIR's
robustness.json has none (run_targets.sh with EXPERT_FROM=DIR skips it): the expert does not depend on the
checkpoint, so a run on the same seeds, blocks and camera rate gives the same column. The
table says where the column came from.
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
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None


def _same_episodes(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in ("seed", "episodes", "blocks", "camera_rate"))


def rows(out: Path, expert_from: Path | None = None) -> list[tuple[str, dict | None, dict | None, dict | None]]:
    """(name, alone, with the assist, expert) summaries per evaluation found in `out`; the
    expert's from `expert_from`'s robustness.json where `out`'s has none."""
    found = []
    for name, alone, assist in (("2-5 blocks", "policy_2-5", "assist_2-5"), ("6 blocks", "policy_6", "assist_6"),
                                ("cameras 10 Hz", "camera_10", None), ("cameras 25 Hz", "camera_25", None),
                                ("cameras 50 Hz", "camera_50", None)):
        a = _load(out / f"{alone}.json")
        if a is not None:
            found.append((name, a, _load(out / f"{assist}.json") if assist else None, None))
    table, assisted = _load(out / "robustness.json"), _load(out / "assist_robustness.json")
    other = _load(expert_from / "robustness.json") if expert_from is not None else None
    if expert_from is not None and other is None:
        raise ValueError(f"{expert_from} has no robustness.json to take the expert's column from")
    if other is not None and table is not None and not _same_episodes(table, other):
        raise ValueError(f"{expert_from}/robustness.json ran other episodes than {out}/robustness.json "
                         "(seed, episodes, blocks or camera rate differ)")
    if table is not None:
        for variant, who in table["summaries"].items():
            helped = (assisted or {}).get("summaries", {}).get(variant, {}).get("policy")
            expert = who.get("expert") or (other or {}).get("summaries", {}).get(variant, {}).get("expert")
            found.append((f"world: {variant}", who.get("policy"), helped, expert))
    return found


def markdown(out: Path, expert_from: Path | None = None) -> str:
    lines = ["| evaluation | network alone | alone: first grasp p50 / p90, closed on nothing | with the assist "
             "| scripted expert |", "|---|---|---|---|---|"]
    for name, alone, assist, expert in rows(out, expert_from):
        lines.append(f"| {name} | {_cell(alone)} | {_grasp(alone)} | {_cell(assist)} | {_cell(expert)} |")
    if expert_from is not None:
        lines += ["", f"The scripted expert's column is {expert_from}/robustness.json's, on the same episodes."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    expert_from = None
    if len(argv) == 3 and argv[1] == "--expert-from":
        argv, expert_from = argv[:1], Path(argv[2])
    if len(argv) != 1 or not Path(argv[0]).is_dir() or (expert_from is not None and not expert_from.is_dir()):
        print("usage: python benchmarks/targets_table.py RESULTS_DIR [--expert-from DIR] (directories of "
              "run_targets.sh results)", file=sys.stderr)
        return 2
    try:
        text = markdown(Path(argv[0]), expert_from)
    except ValueError as error:
        print(f"targets_table: {error}", file=sys.stderr)
        return 2
    (Path(argv[0]) / "targets.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
