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
from arm_act.common.interrupts import forget_interrupt

COMMANDS = {
    "demo": "the main job: sim + trained policy over ROS 2 topics, with a live view",
    "collect": "scripted-expert demonstrations written as rosbag2 MCAP, one bag per episode",
    "train": "train a policy checkpoint from bags or LeRobot datasets",
    "eval": "closed-loop success rate over seeded episodes (checkpoint or expert)",
    "report": "metrics and plots from recorded bags",
    "export": "bags as a LeRobotDataset v3.0 directory (parquet + mp4 videos): --format lerobot",
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
    # SIGTERM (`kill`, `timeout`, a batch scheduler, `docker stop`) takes the same way out: a
    # training saves its state, worker pools stop their workers, bags being written are
    # closed or set aside as on Ctrl-C, instead of the process vanishing mid-write. Exit
    # 128 + 15, as a shell reports a process that SIGTERM ended.
    interrupted: list[int] = []

    def on_stop_signal(signum, frame):
        interrupted.append(signum)
        signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    watched = [sig for sig, handler in previous.items() if main_thread and handler is (
        signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)]
    for sig in watched:
        signal.signal(sig, on_stop_signal)

    def stopped() -> tuple[str, int]:
        if interrupted and interrupted[-1] == signal.SIGTERM:
            return "terminated (SIGTERM)", 128 + signal.SIGTERM
        return "interrupted", 130
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        what, status = stopped()
        print(f"arm-act {name}: {what}", file=sys.stderr)
        return status
    except CommandError as exc:
        if interrupted:
            what, status = stopped()
            print(f"arm-act {name}: {what} (while: {exc})", file=sys.stderr)
            return status
        print(f"arm-act {name}: error: {exc}", file=sys.stderr)
        return 2
    finally:
        for sig in watched:
            signal.signal(sig, previous[sig])
        if interrupted:
            forget_interrupt()


if __name__ == "__main__":
    # Run as `python -m arm_act.cli.main` this file is __main__, a second copy of the module:
    # the commands raise arm_act.cli.main.CommandError, which is the imported module's class.
    from arm_act.cli.main import main as imported_main

    sys.exit(imported_main())
