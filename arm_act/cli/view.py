"""`arm-act view BAG_OR_DIR...`: recorded bags in Rerun, on the live view's layout.

Demo, bringup, collect and eval bags each become one recording on a sim-time timeline: both
cameras with the policy's attention, the arm in 3D with the predicted chunk's path and the
path taken, joints against commands, gripper, diagnostics, the episode's state. --save writes
an .rrd that anyone can open (`rerun FILE.rrd`, or drag it into the web viewer); --web serves
Rerun's web viewer from this machine (127.0.0.1) until Ctrl-C. With neither: a native Rerun
window when a display exists, else the web viewer.
"""
from __future__ import annotations

import os
from pathlib import Path

from arm_act.cli.main import CommandError


def configure(parser) -> None:
    parser.add_argument("bags", nargs="+", type=Path, metavar="BAG_OR_DIR",
                        help="bag directories, .mcap files, or folders of bags")
    parser.add_argument("--save", type=Path, metavar="FILE.rrd",
                        help="write the recording here (several bags: a folder, one .rrd per bag)")
    parser.add_argument("--web", action="store_true", help="serve Rerun's web viewer on 127.0.0.1 until Ctrl-C")
    parser.add_argument("--port", type=int, default=9090, help="web viewer port (default 9090; 0: any free port)")
    add_attention_argument(parser)


def add_attention_argument(parser) -> None:
    """--attention: the camera tab Rerun shows first, on `view` and `demo --viewer rerun`."""
    parser.add_argument("--attention", choices=("queries", "words"), default="queries",
                        help="Rerun's camera tab shown first: the action queries' attention (default) or "
                             "where the instruction's words look")


def run(args) -> int:
    from arm_act.bags import BagError
    from arm_act.view import ViewerError, view_bags

    if not 0 <= args.port < 65536:
        raise CommandError(f"--port {args.port} must be 0..65535")
    web = args.web or (args.save is None and not os.environ.get("DISPLAY"))
    spawn = not web and args.save is None
    try:
        results = view_bags(args.bags, save=args.save, web=web, port=args.port, spawn=spawn,
                            report=lambda line: print(line, flush=True), attention=args.attention)
    except (BagError, ViewerError) as exc:
        raise CommandError(str(exc)) from None
    print(f"{len(results)} bag{'s' if len(results) != 1 else ''} shown")
    return 0
