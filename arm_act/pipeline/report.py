"""The pipeline's final report: report.md and report/*.png beside the final checkpoint,
from the stage manifests (what each stage made and how long it took)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path


def _number(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def _rate(cell: dict) -> str:
    low, high = cell["ci95"]
    return f"{cell['successes']}/{cell['episodes']} = {cell['success_rate']:.1%} (95% CI {low:.1%}-{high:.1%})"


def _success_plot(path: Path, bars: list[tuple[str, dict, dict | None]]) -> None:
    """Success rate with its Wilson interval per evaluation / robustness variant; the
    expert beside the policy where it ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(bars) + 2), 3.4), dpi=110)
    for i, (_, policy, expert) in enumerate(bars):
        for offset, cell, colour, label in ((-0.18, policy, "tab:blue", "policy"),
                                            (0.18, expert, "tab:gray", "expert")):
            if cell is None:
                continue
            rate = cell["success_rate"]
            low, high = cell["ci95"]
            ax.bar(i + offset, rate, width=0.34, color=colour, label=label if i == 0 else None)
            ax.errorbar(i + offset, rate, yerr=[[rate - low], [high - rate]], color="black", capsize=3, lw=1)
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], rotation=30, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("success (95% Wilson CI)")
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _grasp_plot(path: Path, rows: list[tuple[str, dict]]) -> None:
    """Histogram of the first grasp's horizontal distance from the named block's centre, one
    line per evaluation (eval.evaluate.grasp_precision's bins, the last one open)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    edges = rows[0][1]["histogram"]["edges_cm"]
    labels = [f"{a:g}-{b:g}" for a, b in zip(edges, edges[1:], strict=False)] + [f">{edges[-1]:g}"]
    fig, ax = plt.subplots(figsize=(6.0, 3.2), dpi=110)
    width = 0.8 / len(rows)
    for i, (name, g) in enumerate(rows):
        counts = g["histogram"]["counts"]
        total = max(1, sum(counts))
        ax.bar([j + (i - (len(rows) - 1) / 2) * width for j in range(len(counts))],
               [c / total for c in counts], width=width,
               label=f"{name}: p50 {g['xy_cm_p50']} cm, p90 {g['xy_cm_p90']} cm")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlabel("first grasp: horizontal distance from the named block's centre (cm)")
    ax.set_ylabel("share of episodes")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _grasp_cell(result: dict) -> str:
    g = result.get("grasp_precision")
    if not g or g.get("xy_cm_p50") is None:
        return ""
    return (f"; first grasp {g['xy_cm_p50']} cm p50 / {g['xy_cm_p90']} cm p90 from the block, "
            f"{g['closed_on_nothing']} closed on nothing")


def _task_cell(params: dict, result: dict) -> str:
    """An evaluation's family, words and goal change, where they are not the plain box task's."""
    parts = [f"{key} {params[key]}" for key in ("task", "phrasing") if key in params]  # absent at the default
    change = result.get("goal_change")
    if change:
        parts.append(f"goal change {change['change']}: {change['reached_new_goal']}/{change['episodes_changed']} "
                     "reached the new goal")
    return "".join(f"; {p}" for p in parts)


def write_report(out: Path, manifests: list[dict], config) -> dict:
    """Write out/report.md and out/report/ (plots, the trainings' loss curves). -> what it wrote."""
    plots = out / "report"
    plots.mkdir(parents=True, exist_ok=True)
    lines = ["# Pipeline report", "", f"Recipe: `{config.source or '(in memory)'}`. Final checkpoint: "
             "`checkpoint/` (a copy of the last training's).", "", "## Stages", "",
             "| stage | wall time | result |", "|---|---|---|"]
    bars: list[tuple[str, dict, dict | None]] = []
    robustness_md = None
    curves = []
    grasps: list[tuple[str, dict]] = []
    for m in manifests:
        result, kind = m.get("result") or {}, m["params"]["kind"]
        if kind in ("collect", "takeover"):
            what = (f"{result.get('bags')} bags; this run collected {result.get('episodes')}, "
                    f"{result.get('successes')} successful")
        elif kind == "train":
            final = result.get("final") or {}
            val = final.get("val_l1")
            what = (f"{result.get('steps')} steps on {result.get('episodes')} episodes / "
                    f"{result.get('frames')} frames, {result.get('samples_per_s')} samples/s; "
                    f"train L1 {_number(final.get('train_l1'))}, val L1 {_number(val)}")
            src = Path(result["checkpoint"]) / "loss_curves.png"
            if src.is_file():
                dest = plots / f"loss_{m['stage']}.png"
                shutil.copy2(src, dest)
                curves.append(dest.name)
        elif kind == "eval":
            assist = "on" if m["params"].get("assist") else "off"
            what = (_rate(result) + f", {m['params']['blocks']} blocks from seed {m['params']['seed']}, "
                    f"assist {assist}" + _task_cell(m["params"], result) + _grasp_cell(result))
            if (result.get("grasp_precision") or {}).get("xy_cm_p50") is not None:
                grasps.append((m["stage"].removeprefix("eval_"), result["grasp_precision"]))
            regrasp = result.get("regrasp")
            if regrasp:
                what += (f"; regrasp: {regrasp['missed_first_grasp']} missed first grasps, "
                         f"{regrasp['succeeded_after_miss']} succeeded")
            bars.append((m["stage"].removeprefix("eval_"), result, None))
        elif kind == "robustness":
            from arm_act.eval.robustness import markdown_table

            robustness_md = markdown_table(result)
            what = f"{len(result['rows'])} variants (below)"
            for row in result["rows"]:
                if "policy" in row:
                    bars.append((f"rob. {row['variant']}", row["policy"], row.get("expert")))
        else:
            what = ""
        runs = m.get("runs_s") or [m["wall_time_s"]]
        wall = f"{m['wall_time_s']:.0f} s" + (f" ({len(runs)} runs)" if len(runs) > 1 else "")
        lines.append(f"| {m['stage']} | {wall} | {what} |")
    total = sum(m["wall_time_s"] for m in manifests)
    lines += ["", f"Total wall time of the stages: {total / 60:.1f} min (a stage that was interrupted and resumed "
              "counts every run).", ""]
    if robustness_md:
        lines += ["## Robustness", "", robustness_md, ""]
    if bars:
        _success_plot(plots / "success.png", bars)
        lines += ["## Success", "", "![success](report/success.png)", ""]
    if grasps:
        _grasp_plot(plots / "grasp_error.png", grasps)
        lines += ["## Grasp precision", "", "Where the gripper first closed, measured horizontally from the named "
                  "block's centre.", "", "![grasp error](report/grasp_error.png)", ""]
    if curves:
        lines += ["## Training", ""] + [f"![{c}](report/{c})" for c in curves] + [""]
    (out / "report.md").write_text("\n".join(lines))
    (plots / "stages.json").write_text(json.dumps(manifests, indent=2, default=str) + "\n")
    return {"report": str(out / "report.md"), "plots": sorted(p.name for p in plots.glob("*.png"))}
