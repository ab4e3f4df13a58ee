"""`arm-act export --format lerobot BAG_OR_DIR... --out DIR`: demonstration bags as a
LeRobotDataset v3.0 directory (parquet + mp4), for LeRobot's tools and policies; `arm-act
train --data DIR` reads it back.

    arm-act export --format lerobot data/demos --out datasets/demos
    arm-act export --format lerobot data/a data/b --out datasets/ab --codec av1 --include-failed

Each argument is a bag, an .mcap file or a directory with bags at any depth. Rows are control
ticks, each with the latest camera frame (arm_act/data/lerobot/export.py; docs/using.md,
"LeRobot datasets"). Progress goes to stderr, a summary with every skipped bag and why to
stdout. A path without bags, a bag that cannot be read or a non-empty --out: one line on
stderr and exit status 2, and nothing is left at --out.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from arm_act.cli.main import CommandError


def configure(parser: argparse.ArgumentParser) -> None:
    from arm_act.data.lerobot.layout import CODECS

    parser.add_argument("bags", nargs="+", metavar="BAG_OR_DIR", help="bags, .mcap files or directories holding bags")
    parser.add_argument("--format", required=True, choices=("lerobot",),
                        help="lerobot: a LeRobotDataset v3.0 directory")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="the dataset directory to write")
    parser.add_argument("--codec", default="h264", choices=tuple(CODECS),
                        help="video codec: h264 (default; libx264 4:4:4 at qp 0, lossless up to the colour "
                             "conversion's rounding) or av1 (LeRobot's default: libsvtav1 4:2:0 crf 30, "
                             "smaller and lossy)")
    parser.add_argument("--cameras", default="front,wrist", metavar="A,B",
                        help="cameras to export, in this order (default: front,wrist)")
    parser.add_argument("--include-failed", action="store_true",
                        help="also export failed demonstrations (meta/episodes marks them arm_act/success=false)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out when it is not empty")


def run(args) -> int:
    from arm_act.data.dataset import DatasetError
    from arm_act.data.lerobot.export import export_lerobot

    cameras = tuple(c for c in args.cameras.split(",") if c)
    if not cameras:
        raise CommandError("--cameras names no camera")
    try:
        report = export_lerobot(args.bags, args.out, cameras=cameras, codec=args.codec,
                                include_failed=args.include_failed, overwrite=args.overwrite)
    except DatasetError as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:
        raise CommandError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    print(f"dataset:    {report.out} (LeRobotDataset v3.0, {report.fps} fps, {report.codec} videos)")
    print(f"episodes:   {report.episodes} of {report.bags_found} bags, {len(report.tasks)} tasks")
    print(f"rows:       {report.rows} control ticks, {report.camera_frames} with a new camera frame")
    if report.commands_before_first_frame:
        print(f"not rows:   {report.commands_before_first_frame} commands before an episode's first camera frame")
    print(f"skipped:    {len(report.skipped)}")
    for bag, why in report.skipped:
        print(f"  {bag}: {why}")
    return 0
