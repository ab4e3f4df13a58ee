"""`arm-act collect`: scripted-expert demonstrations as rosbag2 MCAP, one bag per episode.

    arm-act collect --episodes 200 --seed 0 --blocks 2-5 --out data/demos --workers 2

Expert takeover (DAgger-style data from the policy's own states):

    arm-act collect --policy checkpoints/default --handover 1-10 --episodes 400 --seed 300000 --out data/takeover

What an episode is, how it is seeded and recorded, and what a takeover bag holds:
arm_act/data/collect.py. This module parses the options, calls arm_act.data.collect.collect
and prints the summary.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from arm_act.cli.eval import add_change_goal_argument, add_task_arguments
from arm_act.cli.main import CommandError
from arm_act.common.episodes import parse_blocks
from arm_act.common.progress import progress_bar


def configure(parser) -> None:
    parser.add_argument("--episodes", type=int, required=True, help="number of episodes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode (then S+1, S+2, ...)")
    parser.add_argument("--blocks", default="2-5", help="block count N or range LO-HI")
    parser.add_argument("--out", type=Path, required=True, help="directory for the bags")
    parser.add_argument("--workers", type=int, default=1,
                        help="parallel worker processes (with --ray local: the local Ray instance's CPUs)")
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="one Ray task per episode: local (start Ray here), auto or ray://HOST:PORT "
                             "(join a cluster); bags come back to this machine as bytes")
    parser.add_argument("--perturb", type=float, default=0.0,
                        help="expert perturbation probability per waypoint (recovery demonstrations)")
    parser.add_argument("--world", metavar="NAME",
                        help="a world perturbation applied to every episode, drawn from its seed "
                             "(lighting, camera, size, distractors, crowded, push): domain randomisation; "
                             "use seeds apart from the robustness evaluation's (400000+)")
    add_task_arguments(parser)
    add_change_goal_argument(parser)
    parser.add_argument("--control-rate", type=int, default=50, help="Hz")
    parser.add_argument("--camera-rate", type=int, default=10, help="Hz")
    parser.add_argument("--compression", choices=("none", "zstd"), default="none", help="MCAP chunk compression")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    group = parser.add_argument_group("expert takeover")
    group.add_argument("--policy", type=Path, metavar="CKPT_DIR",
                       help="a checkpoint that drives each episode until the handover time")
    group.add_argument("--handover", metavar="LO-HI",
                       help="handover time range, sim seconds (with --policy; default 1-10); miss: the expert "
                            "takes over only when the policy's grasp closes on nothing (re-grasp demonstrations); "
                            "grasp: as the policy starts to close the gripper (aim corrections); "
                            "push (with --world push): a moment after the push moved the block (re-aim demonstrations)")
    group.add_argument("--latency-ticks", type=int,
                       help="control ticks before a chunk is usable (with --policy; default 1)")
    group.add_argument("--assist", action="store_true",
                       help="the driving policy runs with the hand-written assist (policy_node's assist; with "
                            "--policy; default off: the takeover labels the network's own errors)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the complete bags already in --out and collect only the missing episodes "
                             "(a bag left incomplete by an interrupted run is set aside as <name>.incomplete)")


def _parse_handover(text: str) -> tuple[float, float] | str:
    from arm_act.data.collect import HANDOVER_WORDS

    if text in HANDOVER_WORDS:
        return text
    try:
        lo, _, hi = text.partition("-")
        return float(lo), float(hi or lo)
    except ValueError:
        raise CommandError(f"--handover {text!r} must be seconds LO-HI, e.g. 1-10, miss, grasp or push") from None


def run(args) -> int:
    from arm_act.data.collect import CollectConfig, CollectError, collect
    from arm_act.policy.checkpoint import CheckpointError

    try:  # everything is validated before the first episode
        blocks = parse_blocks(args.blocks)
        config = CollectConfig(
            out=args.out, perturb=args.perturb, control_rate=args.control_rate, camera_rate=args.camera_rate,
            compression=None if args.compression == "none" else args.compression, policy=args.policy,
            handover=None if args.handover is None else _parse_handover(args.handover),
            latency_ticks=args.latency_ticks, assist=args.assist, world=args.world, task=args.task,
            instruction=args.instruction, change_goal=args.change_goal)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    with progress_bar(args.episodes, "collect", unit="ep") as bar:
        successes = []

        def on_record(record: dict) -> None:
            successes.append(record["success"])
            bar.update(1)
            bar.set_postfix(success=f"{sum(successes)}/{len(successes)}")

        try:
            summary = collect(config, args.episodes, args.seed, blocks, workers=args.workers, resume=args.resume,
                              on_record=on_record, ray=args.ray)
        except CheckpointError as exc:
            raise CommandError(f"--policy {exc}") from None
        except (ValueError, CollectError) as exc:
            raise CommandError(str(exc)) from None
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{summary['episodes']} episodes, {summary['successes']} successful, {summary['frames']} frames, "
          f"{summary['bytes'] / 1e6:.1f} MB in {args.out}, {summary['wall_time_s']:.1f} s")
    failed = [r["seed"] for r in summary["episodes_detail"] if not r["success"]]
    if failed:
        print(f"failed expert episodes (kept, success: false): seeds {failed}")
    retried = summary.get("ray", {}).get("retried")
    if retried:
        print(f"ray: {len(retried)} task(s) failed once and succeeded when run again: {retried}")
    return 0


if __name__ == "__main__":
    from arm_act.cli.main import main

    sys.exit(main(["collect", *sys.argv[1:]]))
