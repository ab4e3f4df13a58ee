"""Does the network take the block to its reference? A fit of where each named block ended
against where its reference stood, from the `final_place` of `arm-act eval` records.

    python benchmarks/place_fit.py EVAL.json [EVAL.json ...] [--lifted] [--json OUT]

For each file (one family's evaluation), per horizontal axis: the least-squares slope and the
correlation of the named block's final position on the reference's (a network that looks the
reference up gives a slope near 1; one that goes to a fixed place, near 0), and the p50 of the
final horizontal distance between the two. Box records, whose reference is the box, are
reported too; the box does not move between episodes much, so their fit says little.
With --lifted the fit reads only the episodes that lifted the named block: a block never
lifted ends where it started, which says nothing about where the network would take it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def fit(path: Path, lifted_only: bool = False) -> dict:
    """One evaluation file -> {family, episodes, successes, slope_x/y, corr_x/y, distance_p50_cm};
    lifted_only: over the episodes that lifted the named block."""
    body = json.loads(Path(path).read_text())
    rows = [r for r in body.get("results", []) if isinstance(r, dict) and r.get("final_place")]
    if not rows:
        raise ValueError(f"{path}: no records with final_place (an in-process family evaluation writes them)")
    if lifted_only:
        rows = [r for r in rows if r.get("lifted_named_block")]
        if len(rows) < 2:
            raise ValueError(f"{path}: {len(rows)} episode(s) lifted the named block; a fit needs two or more")
    named = np.array([r["final_place"]["named_cm"][:2] for r in rows], float)
    reference = np.array([r["final_place"]["reference_cm"][:2] for r in rows], float)
    out = {"file": Path(path).name, "family": rows[0].get("family"), "lifted_only": lifted_only, "episodes": len(rows),
           "successes": int(sum(bool(r.get("success")) for r in rows)),
           "distance_p50_cm": round(float(np.median([r["final_place"]["distance_xy_cm"] for r in rows])), 2)}
    for axis, name in enumerate("xy"):
        x, y = reference[:, axis], named[:, axis]
        spread = float(np.var(x))
        slope = float(np.cov(x, y, bias=True)[0, 1] / spread) if spread > 0 else float("nan")
        corr = float(np.corrcoef(x, y)[0, 1]) if spread > 0 and np.var(y) > 0 else float("nan")
        out[f"slope_{name}"], out[f"corr_{name}"] = round(slope, 3), round(corr, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("evals", nargs="+", type=Path)
    parser.add_argument("--lifted", action="store_true", help="fit only the episodes that lifted the named block")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    rows = []
    for path in args.evals:
        try:
            rows.append(fit(path, lifted_only=args.lifted))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"place_fit: skipped: {exc}", file=sys.stderr)
    if not rows:
        return 1
    print(f"{'file':28} {'family':9} {'ok':>7} {'slope x':>8} {'corr x':>7} {'slope y':>8} {'corr y':>7} "
          f"{'dist p50':>9}")
    for r in rows:
        print(f"{r['file']:28} {r['family']!s:9} {r['successes']:>3}/{r['episodes']:<3} {r['slope_x']:>8.3f} "
              f"{r['corr_x']:>7.3f} {r['slope_y']:>8.3f} {r['corr_y']:>7.3f} {r['distance_p50_cm']:>7.2f} cm")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
