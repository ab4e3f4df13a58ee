"""`arm-act`: the command line of the package.

Each subcommand lives in its own module ``arm_act.cli.<name>`` exposing
``configure(parser)`` and ``run(args) -> int``; modules are imported only when their
command runs, so `arm-act budget` never pays for rclpy or PyBullet.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading

from arm_act import __version__

COMMANDS = {
    "demo": "the main job: sim + trained policy over ROS 2 topics, with a live view",
    "collect": "scripted-expert demonstrations written as rosbag2 MCAP, one bag per episode",
    "train": "train a policy checkpoint from bags",
    "eval": "closed-loop success rate over seeded episodes (checkpoint or expert)",
    "report": "metrics and plots from recorded bags",
    "view": "recorded bags in Rerun (cameras with attention, 3D, joints, diagnostics): --save FILE.rrd or --web",
    "bench": "latency and throughput figures of the policy and the loop",
    "budget": "tokens, parameters and FLOPs of a policy config against the control period",
    "pipeline": "the whole training recipe from nothing to a checkpoint and its report, resumable",
}


class CommandError(Exception):
    """An error the user can fix; printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arm-act", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"arm-act {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, help_text in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Parse only the command name first, then let the command's module build its parser.
    head, rest = parser.parse_known_args(argv[:1] if argv and argv[0] in COMMANDS else argv)
    name = head.command
    module = importlib.import_module(f"arm_act.cli.{name}")
    command_parser = argparse.ArgumentParser(prog=f"arm-act {name}", description=COMMANDS[name])
    command_parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    module.configure(command_parser)
    args = command_parser.parse_args(argv[1:])
    logging.basicConfig(
        level=logging.DEBUG if args.verbose or head.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    # Ctrl-C raises KeyboardInterrupt as usual, and is also remembered: an interrupt that
    # lands inside a native library can come out as that library's error instead (safetensors
    # reported a checkpoint as "not a readable safetensors file" while it was being loaded),
    # and that error is then the interrupt, not a problem with the file.
    interrupted: list[int] = []

    def on_sigint(signum, frame):
        interrupted.append(signum)
        signal.default_int_handler(signum, frame)

    previous = signal.getsignal(signal.SIGINT)
    watching = previous is signal.default_int_handler and threading.current_thread() is threading.main_thread()
    if watching:
        signal.signal(signal.SIGINT, on_sigint)
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        print(f"arm-act {name}: interrupted", file=sys.stderr)
        return 130
    except CommandError as exc:
        if interrupted:
            print(f"arm-act {name}: interrupted (while: {exc})", file=sys.stderr)
            return 130
        print(f"arm-act {name}: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if watching:
            signal.signal(signal.SIGINT, previous)


if __name__ == "__main__":
    sys.exit(main())
