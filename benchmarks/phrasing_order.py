"""Which words lose a family evaluation: its episodes grouped by sentence template and by word
order, from the records of an `arm-act eval --task FAMILY [--phrasing held_out]` run.

    python benchmarks/phrasing_order.py EVAL.json [EVAL.json ...] [--json OUT]

Order: "block first" when the sentence names the block to move before its place (the box, or
the reference block), as every training template does: "put the red block on the blue
block"; "place first" when the place comes first: "on the blue block stack the red one". A
template is the sentence with the moved block's colour as {c} and the reference's as {r}.

Per group: episodes, successes, first grasps that closed on nothing, episodes that lifted
another block than the named one, and the target head's error at the first camera pair
(median, cm): a network that takes the first colour it reads for the block to move picks
the reference in "place first" sentences, and its target head points there too.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def order_of(instruction: str, goal: dict) -> str:
    """'block first' or 'place first': whether the moved block's colour comes before its place
    (the word "box", or the reference block's colour) in the sentence."""
    words = instruction.split()
    block = words.index(goal["colour"])
    place = words.index("box" if goal["family"] == "box" else goal["reference"])
    return "block first" if block < place else "place first"


def template_of(instruction: str, goal: dict) -> str:
    words = instruction.split()
    names = {goal["colour"]: "{c}"}
    if goal.get("reference"):
        names[goal["reference"]] = "{r}"
    return " ".join(names.get(w, w) for w in words)


def _group(records: list[dict]) -> dict:
    targets = [r["target_error"]["first_cm"] for r in records
               if isinstance(r.get("target_error"), dict) and r["target_error"].get("first_cm") is not None]
    return {"episodes": len(records), "successes": sum(bool(r["success"]) for r in records),
            "first_grasp_on_nothing": sum(bool(r.get("first_grasp_missed")) for r in records),
            "lifted_other_block": sum(bool(r.get("lifted_other_block")) for r in records),
            "target_first_cm_p50": round(float(np.median(targets)), 2) if targets else None}


def _goal(record: dict) -> dict | None:
    """The record's goal; a box evaluation's records name only the instruction."""
    from arm_act.sim.instructions import Goal, parse_goal

    if record.get("goal"):
        return record["goal"]
    goal = parse_goal(record.get("instruction") or "")
    return goal.to_dict() if isinstance(goal, Goal) else None


def breakdown(path: Path) -> dict:
    """One evaluation file -> its records grouped by word order and by template."""
    body = json.loads(Path(path).read_text())
    records = [dict(r, goal=_goal(r)) for r in body.get("results", []) if r.get("instruction")]
    records = [r for r in records if r["goal"]]
    if not records:
        raise ValueError(f"{path}: no records with an instruction the parser reads (arm-act eval --task ...)")
    orders: dict[str, list] = {}
    templates: dict[str, list] = {}
    for r in records:
        orders.setdefault(order_of(r["instruction"], r["goal"]), []).append(r)
        templates.setdefault(template_of(r["instruction"], r["goal"]), []).append(r)
    return {"file": Path(path).name, "family": records[0]["goal"]["family"], "episodes": len(records),
            "by_order": {k: _group(v) for k, v in sorted(orders.items())},
            "by_template": {k: _group(v) for k, v in sorted(templates.items(), key=lambda kv: -len(kv[1]))}}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evals", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, default=None, help="write every breakdown here")
    args = parser.parse_args(argv)
    try:
        results = [breakdown(p) for p in args.evals]
    except (OSError, ValueError, KeyError) as exc:
        print(f"phrasing_order: {exc}", file=sys.stderr)
        return 2
    for res in results:
        print(f"{res['file']} ({res['family']}, {res['episodes']} episodes)")
        for order, g in res["by_order"].items():
            print(f"  {order:12s} {g['successes']:3d}/{g['episodes']:<3d} on nothing {g['first_grasp_on_nothing']:3d}  "
                  f"other block lifted {g['lifted_other_block']:3d}  target head p50 {g['target_first_cm_p50']} cm")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
