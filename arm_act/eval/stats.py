"""What an evaluation's episode records add up to: the success rate with its Wilson interval,
per block count, statuses, where failures happen and the first grasp's precision."""
from __future__ import annotations

import math

import numpy as np


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial rate (better than the normal
    approximation near 0 and 1, where our rates live)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def sign_test_p(wins: int, losses: int) -> float:
    """Two-sided exact sign test: the chance of a split at least this uneven between two
    policies run on the same seeds, if each seed where they disagree were a fair coin."""
    n, k = wins + losses, min(wins, losses)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


# Edges (cm) of the histogram of first-grasp errors in summaries; the last bin is open.
GRASP_ERROR_BINS_CM = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def grasp_precision(results: list[dict]) -> dict:
    """How far the first grasp closed from the named block's centre, horizontally (cm), over
    the episodes that closed the gripper at all, and whether that grasp held (lifted the block).
    -> {"closed": n, "held": n, "closed_on_nothing": n, "xy_cm_p50", "xy_cm_p90", "xy_cm_max",
        "histogram": {"edges_cm": [...], "counts": [...]}} (percentiles None without a grasp)."""
    xy = np.array([r["first_grasp_xy_cm"] for r in results if r.get("first_grasp_xy_cm") is not None])
    edges = list(GRASP_ERROR_BINS_CM)
    counts = np.histogram(xy, bins=[*edges, np.inf])[0] if xy.size else np.zeros(len(edges), dtype=int)
    closed = sum(1 for r in results if r.get("grasps", 0) >= 1)

    def pct(q: float) -> float | None:
        return round(float(np.percentile(xy, q)), 2) if xy.size else None

    return {"closed": closed, "held": sum(1 for r in results if r.get("first_grasp_held")),
            "closed_on_nothing": sum(1 for r in results if r.get("first_grasp_missed")),
            "xy_cm_p50": pct(50), "xy_cm_p90": pct(90), "xy_cm_max": pct(100),
            "histogram": {"edges_cm": edges, "counts": [int(c) for c in counts]}}


def describe_grasp_precision(g: dict) -> str:
    """One line for a summary: 'first grasp 0.61 cm p50, 1.40 cm p90 (n=200), 3 closed on nothing'."""
    if g["xy_cm_p50"] is None:
        return "no grasp closed"
    return (f"first grasp {g['xy_cm_p50']:.2f} cm p50, {g['xy_cm_p90']:.2f} cm p90 from the block's centre "
            f"(n={g['closed']}), {g['closed_on_nothing']} closed on nothing")


def summarize(results: list[dict], extra: dict) -> dict:
    """The summary of episode records: rate, CI, per block count, statuses, partial progress
    and the target head's error where the records have them; `extra` keys come first."""
    n = len(results)
    successes = sum(1 for r in results if r["success"])
    low, high = wilson_interval(successes, n)
    by_blocks: dict[int, list[bool]] = {}
    for r in results:
        by_blocks.setdefault(r["n_blocks"], []).append(r["success"])
    if results and "lifted_named_block" in results[0]:  # policies: where the failures happen
        extra = {**extra, "lifted_named_block": sum(r["lifted_named_block"] for r in results),
                 "lifted_other_block": sum(r["lifted_other_block"] for r in results)}
    if results and "first_grasp_missed" in results[0]:  # re-grasps: the first grasp closed on nothing
        missed = [r for r in results if r["first_grasp_missed"]]
        extra = {**extra, "regrasp": {"missed_first_grasp": len(missed),
                                      "succeeded_after_miss": sum(r["success"] for r in missed),
                                      "never_grasped": sum(1 for r in results if r["grasps"] == 0)}}
    if results and "first_grasp_missed" in results[0]:
        extra = {**extra, "grasp_precision": grasp_precision(results)}
    if results and results[0].get("perturbation") is not None and results[0]["perturbation"]["kind"] == "push":
        extra = {**extra, "pushed": sum(1 for r in results if r["perturbation"]["pushed"])}
    families: dict[str, list[bool]] = {}
    for r in results:
        if "family" in r:
            families.setdefault(r["family"], []).append(r["success"])
    if len(families) > 1:  # a mix: success per task family
        extra = {**extra, "by_family": {f: {"episodes": len(v), "successes": sum(v), "success_rate": sum(v) / len(v)}
                                        for f, v in sorted(families.items())}}
    grounding = sorted(r["target_error"]["first_cm"] for r in results if "target_error" in r)
    if grounding:  # where the target head puts the named block at the first camera pair
        extra = {**extra, "target_error_first_cm_median": grounding[len(grounding) // 2]}
    after = [r["target_error"]["after_change"] for r in results if "after_change" in (r.get("target_error") or {})]
    if after:  # where it puts the new goal's block after a goal change, and its pull to the old one
        extra = {**extra, "target_after_change": {
            key: round(float(np.median(values)), 3)
            for key in ("first_cm", "median_cm", "pull_first", "pull_median")
            if (values := [a[key] for a in after if key in a])}}
    return {
        **extra,
        "episodes": n,
        "successes": successes,
        "success_rate": successes / n if n else 0.0,
        "ci95": [round(low, 4), round(high, 4)],
        "by_blocks": {str(k): {"episodes": len(v), "success_rate": sum(v) / len(v)}
                      for k, v in sorted(by_blocks.items())},
        "statuses": {s: sum(1 for r in results if r["status"] == s) for s in ("success", "failure", "timeout")},
        "results": results,
    }
