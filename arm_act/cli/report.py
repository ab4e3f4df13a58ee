"""`arm-act report BAG_OR_DIR... [--json] [--out DIR]`: metrics and plots from recorded bags.

Each argument is a bag, an .mcap file or a directory with bags at any depth (e.g. the
output of `arm-act collect`; the rule: arm_act/bags/find.py). Metrics come only from the
bag contents (arm_act.eval.report). Writes per-bag PNG plots, summary.md and report.json
into --out; prints one line per bag (or, with --json, all metrics as JSON). A path that is
not a bag, a truncated or incomplete bag: one line on stderr and exit status 2
(--allow-incomplete includes incomplete bags, marked as such).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from arm_act.bags import BagError
from arm_act.cli.main import CommandError
from arm_act.eval.report import aggregate_line, bag_line, describe_goal_changes, report_bags


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bags", nargs="+", metavar="BAG_OR_DIR", help="bags, .mcap files or directories holding bags")
    parser.add_argument("--json", action="store_true", help="print all metrics as JSON")
    parser.add_argument("--out", default="report", metavar="DIR",
                        help="directory for plots, summary.md and report.json (default: ./report)")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="include bags whose writer did not close them (reported as incomplete)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def run(args) -> int:
    out = Path(args.out)
    try:
        analyses, summary, files = report_bags(args.bags, out, allow_incomplete=args.allow_incomplete,
                                               plots=not args.no_plots)
    except BagError as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:
        raise CommandError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps({"bags": [a.metrics for a in analyses], "aggregate": summary,
                          "files": [str(f) for f in files]}, indent=1))
        return 0
    for analysis in analyses:
        print(f"{analysis.path}: {bag_line(analysis.metrics)}")
        for episode in analysis.metrics["episodes"]:
            changes = describe_goal_changes(episode)
            if changes:
                first = episode.get("first_instruction") or episode["instruction"]
                print(f"  episode {episode['episode']} ({first!r}): {changes}")
    print(f"total: {aggregate_line(summary)}")
    print(f"wrote {out / 'summary.md'} and {len(files) - 2} plots")
    return 0
