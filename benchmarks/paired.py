"""Two checkpoints on the same seeds, seed by seed: where one succeeds and the other fails,
and the two-sided sign test on that split. Each argument pair is an `arm-act eval --out`
file of A and of B on the same episodes (a plain evaluation, or a robustness run of one
world); the pairs are pooled.

    python benchmarks/paired.py A1.json B1.json [A2.json B2.json ...]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from arm_act.eval.stats import sign_test_p


def outcomes(path: Path) -> dict[int, bool]:
    """{seed: success} from an evaluation file; a robustness file must hold one world."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if "summaries" in data:
        worlds = [who["policy"] for who in data["summaries"].values() if "policy" in who]
        if len(worlds) != 1:
            raise ValueError(f"{path}: a robustness file of {len(worlds)} worlds; give one world's run")
        data = worlds[0]
    if "results" not in data:
        raise ValueError(f"{path}: no episode records (not an `arm-act eval --out` file)")
    return {int(r["seed"]): bool(r["success"]) for r in data["results"]}


def compare(pairs: list[tuple[Path, Path]]) -> dict:
    """Per pair and pooled: successes of A and B, seeds only A or only B succeeded on, p."""
    rows, a_total, b_total, a_only, b_only = [], 0, 0, 0, 0
    for a_path, b_path in pairs:
        a, b = outcomes(a_path), outcomes(b_path)
        if set(a) != set(b):
            raise ValueError(f"{a_path} and {b_path} ran different seeds")
        row = {"a": str(a_path), "b": str(b_path), "episodes": len(a), "a_successes": sum(a.values()),
               "b_successes": sum(b.values()), "a_only": sum(a[s] and not b[s] for s in a),
               "b_only": sum(b[s] and not a[s] for s in a)}
        rows.append(row)
        a_total, b_total = a_total + row["a_successes"], b_total + row["b_successes"]
        a_only, b_only = a_only + row["a_only"], b_only + row["b_only"]
    return {"pairs": rows, "episodes": sum(r["episodes"] for r in rows), "a_successes": a_total,
            "b_successes": b_total, "a_only": a_only, "b_only": b_only, "sign_test_p": sign_test_p(a_only, b_only)}


def main(argv: list[str]) -> int:
    if not argv or len(argv) % 2:
        print("usage: python benchmarks/paired.py A1.json B1.json [A2.json B2.json ...]", file=sys.stderr)
        return 2
    paths = [Path(a) for a in argv]
    try:
        result = compare(list(zip(paths[::2], paths[1::2], strict=True)))
    except (OSError, ValueError, KeyError) as error:
        print(f"paired: {error}", file=sys.stderr)
        return 2
    for row in result["pairs"]:
        print(f"{row['a']} {row['a_successes']} / {row['b']} {row['b_successes']} of {row['episodes']}: "
              f"only A {row['a_only']}, only B {row['b_only']}")
    print(f"pooled, {result['episodes']} episodes: A {result['a_successes']}, B {result['b_successes']}; "
          f"only A {result['a_only']}, only B {result['b_only']}; two-sided sign test p = {result['sign_test_p']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
