"""`arm-act eval`: closed-loop success rate over seeded episodes, in process.

    arm-act eval --policy expert --episodes 200 --seed 1000 --blocks 2-5 --json
    arm-act eval --policy checkpoints/default --episodes 200 --seed 5000 --blocks 6

Episode i uses seed S+i and a block count drawn from it (arm_act.common.episodes), exactly as
sim_node schedules them, so in-process and over-ROS runs of the same seeds are the same
scenes. Progress goes to stderr; the result (text or --json) to stdout.
"""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from arm_act.cli.main import CommandError
from arm_act.common.episodes import episode_spec, parse_blocks
from arm_act.common.progress import progress_bar


def configure(parser) -> None:
    parser.add_argument("--policy", default="expert", help="'expert' or a checkpoint directory")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1000, help="first episode seed")
    parser.add_argument("--blocks", default="2-5", help="block count N or range LO-HI")
    parser.add_argument("--camera-rate", type=int, default=10, help="Hz")
    parser.add_argument("--control-rate", type=int, default=50, help="Hz")
    parser.add_argument("--time-limit", type=float, default=20.0, help="episode time limit, sim seconds")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    parser.add_argument("--over-ros", action="store_true",
                        help="run the episodes through sim_node + policy_node/expert_node over DDS, in lockstep")
    add_policy_arguments(parser)


def add_policy_arguments(parser) -> None:
    """Options that only apply to a checkpoint policy (the runtime)."""
    group = parser.add_argument_group("checkpoint policy")
    group.add_argument("--execution", choices=("ensemble", "queue"), default="ensemble",
                       help="temporal ensembling over overlapping chunks, or a chunk queue")
    group.add_argument("--ensemble-m", type=float, default=0.1, help="ensembling weights exp(-m*i)")
    group.add_argument("--latency-ticks", type=int, default=None,
                       help="control ticks before a chunk is usable (default: measured inference latency)")
    group.add_argument("--ideal", action="store_true", help="zero inference delay (ablation)")
    group.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    group.add_argument("--backend", choices=("torch", "onnx"), default="torch",
                       help="inference backend: eager torch, or an ONNX graph exported at load and "
                            "run by onnxruntime (checked against torch; falls back to torch)")
    group.add_argument("--max-joint-speed", type=float, default=3.0,
                       help="rad/s clamp on commanded joint motion (as policy_node)")
    group.add_argument("--video", type=Path, help="directory for per-episode videos with attention")
    group.add_argument("--bags", type=Path, help="directory for a bag of every rollout")


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


def summarize(results: list[dict], extra: dict) -> dict:
    n = len(results)
    successes = sum(1 for r in results if r["success"])
    low, high = wilson_interval(successes, n)
    by_blocks: dict[int, list[bool]] = {}
    for r in results:
        by_blocks.setdefault(r["n_blocks"], []).append(r["success"])
    if results and "lifted_named_block" in results[0]:  # policies: where the failures happen
        extra = {**extra, "lifted_named_block": sum(r["lifted_named_block"] for r in results),
                 "lifted_other_block": sum(r["lifted_other_block"] for r in results)}
    grounding = sorted(r["target_error"]["first_cm"] for r in results if "target_error" in r)
    if grounding:  # where the target head puts the named block at the first camera pair
        extra = {**extra, "target_error_first_cm_median": grounding[len(grounding) // 2]}
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


def run(args) -> int:
    from arm_act.sim import ArmEnv, SimConfig

    try:
        blocks = parse_blocks(args.blocks)
        config = SimConfig(control_rate_hz=args.control_rate, camera_rate_hz=args.camera_rate,
                           episode_time_limit=args.time_limit)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if args.episodes < 1:
        raise CommandError(f"--episodes {args.episodes} must be >= 1")
    factory, describe = make_agent_factory(args, config)
    results = []
    started = time.monotonic()
    if args.over_ros:
        from arm_act.eval.over_ros import run_over_ros

        if args.video or args.bags:
            raise CommandError("--video and --bags apply to in-process evaluation; record a bag with bag_recorder")
        checkpoint = None if args.policy == "expert" else str(Path(args.policy))
        latency = describe["latency_ticks"] if isinstance(describe, dict) else 0
        results = run_over_ros(args, args.blocks, checkpoint, latency)
        return _report(args, results, describe, started)
    env = ArmEnv(config)
    try:
        with progress_bar(total=args.episodes, desc="eval", unit="ep") as bar:
            for index in range(args.episodes):
                spec = episode_spec(index, args.seed, blocks)
                agent = factory(spec)
                result = agent.run(env, spec)
                results.append(result)
                bar.update(1)
                bar.set_postfix(success=f"{sum(r['success'] for r in results)}/{len(results)}")
    finally:
        env.close()
    return _report(args, results, describe, started)


def _report(args, results, describe, started) -> int:
    summary = summarize(results, {
        "policy": describe,
        "seed": args.seed,
        "blocks": args.blocks,
        "camera_rate": args.camera_rate,
        "control_rate": args.control_rate,
        "over_ros": bool(args.over_ros),
        "wall_time_s": round(time.monotonic() - started, 2),
    })
    text = json.dumps(summary, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
    else:
        low, high = summary["ci95"]
        name = describe if isinstance(describe, str) else (
            f"{describe['checkpoint']} ({describe['execution']}, latency {describe['latency_ticks']} ticks)")
        print(f"{name}: {summary['successes']}/{summary['episodes']} success "
              f"({summary['success_rate']:.1%}, 95% CI {low:.1%}-{high:.1%}) "
              f"in {summary['wall_time_s']:.0f} s")
        for k, v in summary["by_blocks"].items():
            print(f"  {k} blocks: {v['success_rate']:.1%} of {v['episodes']}")
        if "lifted_named_block" in summary:
            print(f"  lifted the named block in {summary['lifted_named_block']}, another block in "
                  f"{summary['lifted_other_block']} of {summary['episodes']} episodes")
        if "target_error_first_cm_median" in summary:
            print(f"  target head: the named block is placed {summary['target_error_first_cm_median']:.1f} cm "
                  "from where it is (median, first camera pair)")
    return 0


class ExpertRunner:
    """Runs one expert episode (no rendering: the expert reads object poses)."""

    def __init__(self, spec):
        self.spec = spec

    def run(self, env, spec) -> dict:
        import numpy as np

        from arm_act.sim.rollout import ExpertAgent, run_episode

        agent = ExpertAgent(rng=np.random.default_rng(spec.seed + 1_000_003))
        try:
            result = run_episode(env, agent, spec.seed, spec.n_blocks, render=False)
        finally:
            agent.close()
        return episode_record(result)


def episode_record(result) -> dict:
    return {
        "seed": result.seed,
        "n_blocks": result.n_blocks,
        "instruction": result.instruction,
        "status": result.status,
        "success": bool(result.success),
        "duration": round(float(result.duration), 4),
    }


def make_agent_factory(args, config):
    if args.policy == "expert":
        return ExpertRunner, "expert"
    from arm_act.eval.in_process import make_policy_runner_factory

    path = Path(args.policy)
    if not path.is_dir():
        raise CommandError(f"--policy {args.policy!r} is neither 'expert' nor a checkpoint directory")
    return make_policy_runner_factory(args, config, path)


if __name__ == "__main__":
    from arm_act.cli.main import main

    sys.exit(main(["eval", *sys.argv[1:]]))
