"""Where does a grasp go after the goal changed? The first grasp of each episode of an
`arm-act eval --change-goal AT_S:box` run, measured against the line from the new block to
the old one.

    python benchmarks/goal_change_pull.py EVAL.json [--json OUT]

Each record's first_grasp_offset_cm is the grasp point minus the new goal's block. The old
goal's block is found by resetting the sim to the record's seed and block count without the
change (the layout and the first goal are the same; sim.goal_change draws the new goal from
a stream of its own), before anything has moved. Per episode:

    pull    = offset . (old - new) / |old - new|^2   the fraction of the way to the old block
    cosine  = the cosine between the offset and (old - new), horizontally

A grasp that ignores the old goal scatters around the new block (cosine spread around 0,
pull near 0); one that still leans to the old goal has cosines near 1 and a positive pull.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def pull(path: Path) -> dict:
    """One goal-change evaluation file -> the per-episode rows and their medians."""
    from arm_act.eval.in_process import pull_toward
    from arm_act.sim import ArmEnv
    from arm_act.sim.instructions import Goal, parse_goal

    body = json.loads(Path(path).read_text())
    records = [r for r in body.get("results", []) if r.get("goal_changes") and r.get("first_grasp_offset_cm")]
    if not records:
        raise ValueError(f"{path}: no records with a goal change and a first grasp (arm-act eval --change-goal)")
    rows = []
    with ArmEnv() as env:
        for record in records:
            env.reset(seed=int(record["seed"]), n_blocks=int(record["n_blocks"]))
            old = env.goal.colour
            new = parse_goal(record["instruction"])
            if not isinstance(new, Goal) or new.colour == old:
                continue  # the change kept the block (box -> stack): nothing to lean to
            where = {o.colour: np.asarray(o.position[:2], float) for o in env.objects() if o.kind == "block"}
            towards = 100.0 * (where[old] - where[new.colour])  # cm
            offset = np.asarray(record["first_grasp_offset_cm"][:2], float)
            rows.append({"seed": record["seed"], "success": bool(record["success"]),
                         "old_to_new_cm": round(float(np.linalg.norm(towards)), 2),
                         "offset_cm": round(float(np.linalg.norm(offset)), 2),
                         "pull": round(pull_toward(offset, np.zeros(2), towards), 3),
                         "cosine": round(float(offset @ towards / (np.linalg.norm(offset) * np.linalg.norm(towards)
                                                                   + 1e-12)), 3)})
    if not rows:
        raise ValueError(f"{path}: no episode changed to another block")
    failed = [r for r in rows if not r["success"]]
    return {"file": Path(path).name, "episodes": len(rows), "failed": len(failed),
            "pull_p50": round(float(np.median([r["pull"] for r in rows])), 3),
            "cosine_p50": round(float(np.median([r["cosine"] for r in rows])), 3),
            "offset_p50_cm": round(float(np.median([r["offset_cm"] for r in rows])), 2),
            "failed_pull_p50": round(float(np.median([r["pull"] for r in failed])), 3) if failed else None,
            "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("eval_json", type=Path)
    parser.add_argument("--json", type=Path, help="write the result here")
    args = parser.parse_args(argv)
    try:
        result = pull(args.eval_json)
    except (OSError, ValueError, KeyError) as exc:
        print(f"goal_change_pull: {exc}", file=sys.stderr)
        return 2
    print(f"{result['file']}: {result['episodes']} episodes changed to another block, {result['failed']} failed; "
          f"first grasp {result['offset_p50_cm']} cm from the new block (p50), pull towards the old one "
          f"{result['pull_p50']} (p50; failed {result['failed_pull_p50']}), cosine {result['cosine_p50']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
