"""The head-count ablation's table (docs/training.md, "One head or several"), from the
directory `benchmarks/heads/run.sh OUT` filled: one row per run (heads, seed, variant: "" or
run.sh's VARIANT; "rerun" names a copy of a run without the place head trained again, as the
start of VARIANT=place_ft, beside the first table's run of the same seed).

    python benchmarks/heads/table.py OUT [--json FILE] [--plot FILE.png]
    python benchmarks/heads/table.py benchmarks/results/heads     # the kept copy
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from place_fit import fit as place_fit


def _metrics_path(run: Path) -> Path:
    """A run's training metrics: in its checkpoint (run.sh's OUT), or beside its evaluations
    (the copy kept in benchmarks/results/heads/)."""
    inside = run / "ckpt" / "metrics.json"
    return inside if inside.exists() else run / "metrics.json"


def run_row(run: Path) -> dict:
    """One run's figures: the training's final validation numbers and each evaluation's."""
    heads, seed, variant = re.fullmatch(r"heads(\d+)_seed(\d+)(?:_(\w+))?", run.name).groups()
    metrics = json.loads(_metrics_path(run).read_text())
    final = metrics["final"]
    row = {"heads": int(heads), "seed": int(seed), "variant": variant or "", "parameters": metrics["parameters"],
           "train_time_s": round(metrics["train_time_s"], 1), "val_l1": final["val_l1"],
           "val_target_cm": final["val_target_cm"], "val_grounding_cm": final.get("val_grounding_cm"),
           "val_grounding_patch": final.get("val_grounding_patch_acc"), "val_place_cm": final.get("val_place_cm")}
    for task in ("relation", "box"):  # box: only the first run evaluated it (0/100; trained on relation alone)
        path = run / f"eval_{task}.json"
        if path.exists():
            e = json.loads(path.read_text())
            row[task] = {"successes": e["successes"], "episodes": e["episodes"],
                         "lifted_named_block": e["lifted_named_block"],
                         "first_grasp_p50_cm": e["grasp_precision"]["xy_cm_p50"]}
    if "relation" in row:  # a run still training has no evaluation yet
        try:  # where the lifted blocks end against their reference: evaluations since the place records
            row["relation"]["place_lifted"] = place_fit(run / "eval_relation.json", lifted_only=True)
        except (KeyError, ValueError):
            pass
    return row


# What each VARIANT of run.sh adds, as the table's "place head" column names it.
VARIANTS = {"place": "queries conditioned", "place_loss": "loss only",
            "place_ft": "added to the trained network, queries conditioned",
            "steps_ft": "none, the same fine-tune without it",
            "rerun": "none (trained again as place_ft's start)"}


def markdown(rows: list[dict]) -> str:
    def cell(row, task):
        e = row.get(task)
        if e is None:
            return "–"
        return (f"{e['successes']}/{e['episodes']}, lifted {e['lifted_named_block']}, "
                f"grasp p50 {e['first_grasp_p50_cm']:.2f} cm")

    def final_place(row):
        fit = (row.get("relation") or {}).get("place_lifted")
        if fit is None:
            return "–"
        return (f"slope {fit['slope_x']:.2f} / {fit['slope_y']:.2f}, corr {fit['corr_x']:.2f} / {fit['corr_y']:.2f}, "
                f"{fit['distance_p50_cm']:.1f} cm")

    lines = ["| heads (width 128) | seed | place head: use, val error | val L1 | val target error "
             "| grounding layouts: error, right patch "
             "| relation: success, lifted the named block, first grasp p50 "
             "| relation, lifted: final place on the reference (x / y), distance p50 | box: the same |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r.get("variant", ""), r["heads"], r["seed"])):
        place = "–" if r.get("val_place_cm") is None else f"{r['val_place_cm']:.2f} cm"
        if r.get("variant") in VARIANTS:
            place = f"{VARIANTS[r['variant']]}, {place}"
        lines.append(f"| {r['heads']} | {r['seed']} | {place} | {r['val_l1']:.4f} | {r['val_target_cm']:.2f} cm | "
                     f"{r['val_grounding_cm']:.2f} cm, {100 * r['val_grounding_patch']:.0f} % | "
                     f"{cell(r, 'relation')} | {final_place(r)} | {cell(r, 'box')} |")
    return "\n".join(lines)


# The plot's groups, left to right: what the place head is in each (run.sh's VARIANT).
GROUPS = (("", "rerun"), ("place",), ("place_loss",), ("steps_ft",), ("place_ft",))
GROUP_NAMES = ("no place\nhead", "place head\nfrom scratch", "its loss only,\nfrom scratch",
               "fine-tuned\nwithout it", "place head\nadded, then\nfine-tuned")


def plot(rows: list[dict], out: Path) -> None:
    """The relation evaluations as dots, one per run: 1 head against 4 in each group of
    GROUPS. Left, the named block lifted (of 100); middle, successes; right, how far from
    the reference the lifted blocks end, with the relation's zone (4-12 cm) shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("lifted the named block", lambda e: e["lifted_named_block"]),
              ("success", lambda e: e["successes"]),
              ("lifted blocks: distance to the reference, p50 (cm)",
               lambda e: (e.get("place_lifted") or {}).get("distance_p50_cm")))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), dpi=100)
    colours = {1: "#d95f02", 4: "#1b9e77"}
    groups = [(i, g) for i, g in enumerate(GROUPS) if any(r.get("variant", "") in g for r in rows)]
    for ax, (title, value) in zip(axes, panels, strict=True):
        for x, (_, group) in enumerate(groups):
            for heads, dx in ((1, -0.15), (4, 0.15)):
                ys = [value(r["relation"]) for r in rows if r.get("variant", "") in group
                      and r["heads"] == heads and "relation" in r]
                ys = [y for y in ys if y is not None]
                # Seeds side by side, so that equal figures stay two dots.
                xs = [x + dx + 0.05 * (k - (len(ys) - 1) / 2) for k in range(len(ys))]
                ax.scatter(xs, ys, color=colours[heads], s=36, zorder=3,
                           label=f"{heads} head{'s' if heads > 1 else ''}" if x == 0 else None)
        ax.set_xticks(range(len(groups)), [GROUP_NAMES[i] for i, _ in groups], fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[1].set_ylabel("of 100 relation episodes, network alone")
    axes[0].set_ylabel("of 100 relation episodes, network alone")
    axes[0].set_ylim(0, 100)
    axes[1].set_ylim(bottom=0)
    axes[2].set_ylim(bottom=0)
    zone = axes[2].axhspan(4, 12, color="#cccccc", alpha=0.4, label="the relation's zone (4-12 cm)")
    handles = [*axes[0].get_legend_handles_labels()[0], zone]
    fig.legend(handles=handles, ncol=3, loc="lower center", fontsize=9, frameon=False)
    fig.suptitle("Relation family: 1 attention head against 4, at width 128 (one dot per training seed)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(out)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    parser.add_argument("--plot", type=Path, help="also draw the relation evaluations (PNG)")
    args = parser.parse_args()
    rows = [run_row(p) for p in sorted(args.out.glob("heads*_seed*")) if p.is_dir() and _metrics_path(p).exists()]
    if not rows:
        raise SystemExit(f"{args.out}: no finished run (heads*_seed*/ckpt/metrics.json or heads*_seed*/metrics.json)")
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
