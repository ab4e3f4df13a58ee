"""`arm-act eval`: closed-loop success rate over seeded episodes, in process or over ROS.

    arm-act eval --policy expert --episodes 200 --seed 1000 --blocks 2-5 --json
    arm-act eval --policy checkpoints/default --episodes 200 --seed 5000 --blocks 6
    arm-act eval --policy checkpoints/default --camera-rate 50 --episodes 60 --seed 500000
    arm-act eval --policy checkpoints/default --robustness all --episodes 50 --seed 400000 --out r.json
    arm-act eval --policy checkpoints/default --episodes 200 --seed 100000 --workers 2 --threads 1
    arm-act eval --policy checkpoints/default --live --compare-in-process --episodes 100 --seed 100000 \
                 --threads 1 --latency-ticks 1 --out live.json

--live runs the episodes through sim_node and policy_node (expert_node) as child processes in
real time, as launch starts them (arm_act/eval/live.py): a line per episode with its real-time
diagnostics, which the JSON keeps per episode (`realtime`). --compare-in-process then runs the
same seeds in process and reports both rates with 95% CIs and the seeds that differ.

--robustness NAME runs the world changed by one perturbation of arm_act/sim/perturb.py
(push, lighting, camera, distractors, size, crowded; `none` for the plain world), the
checkpoint and the scripted expert on the same seeds (--no-expert: the checkpoint only);
`all` runs the plain world and every perturbation and prints one markdown table
(arm_act/eval/robustness.py). --camera-rate must divide --control-rate (10, 25 or 50 at 50 Hz).

What an evaluation runs and how episodes are seeded: arm_act/eval/evaluate.py. This module
parses the options, calls arm_act.eval.evaluate.evaluate and prints the summary. Progress
goes to stderr; the result (text or --json) to stdout.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from arm_act.cli.main import CommandError


def configure(parser) -> None:
    parser.add_argument("--policy", default="expert", help="'expert' or a checkpoint directory")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1000, help="first episode seed")
    parser.add_argument("--blocks", default="2-5", help="block count N or range LO-HI")
    parser.add_argument("--camera-rate", type=int, default=10, help="Hz")
    parser.add_argument("--control-rate", type=int, default=50, help="Hz")
    parser.add_argument("--time-limit", type=float, default=20.0, help="episode time limit, sim seconds")
    add_task_arguments(parser)
    parser.add_argument("--phrasing", choices=("canonical", "training", "held-out"), default="canonical",
                        help="the words of each episode's goal: its canonical sentence, one of the training "
                             "sentences, or one of the held-out sentences training never sees (drawn per episode "
                             "from its seed; docs/tasks.md)")
    add_change_goal_argument(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    parser.add_argument("--over-ros", action="store_true",
                        help="run the episodes through sim_node + policy_node/expert_node over DDS, in lockstep")
    parser.add_argument("--live", action="store_true",
                        help="run the episodes through sim_node + policy_node/expert_node as child processes "
                             "in real time (as launch starts them), with per-episode real-time diagnostics")
    parser.add_argument("--compare-in-process", action="store_true",
                        help="with --live: also run the same seeds in process and compare them side by side")
    parser.add_argument("--logs", type=Path, help="with --live: write the nodes' logs into this directory")
    parser.add_argument("--real-time-factor", type=float, default=1.0,
                        help="with --live: sim speed against the wall clock (default 1; below 1 gives the nodes "
                             "slack, to tell what load costs from what real time itself costs)")
    parser.add_argument("--robustness", metavar="NAME",
                        help="push, lighting, camera, distractors, size, crowded, none, or all (a table); "
                             "a checkpoint runs beside the expert")
    parser.add_argument("--no-expert", action="store_true", help="with --robustness: skip the expert's runs")
    parser.add_argument("--workers", type=int, default=1,
                        help="in-process episodes in this many local processes, each with its own sim and policy "
                             "(give each --threads 1 on a small machine); the same records as one process")
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="one Ray task per episode: local (start Ray here), auto or ray://HOST:PORT "
                             "(join a cluster); the checkpoint travels to the tasks, videos and bags come back")
    add_policy_arguments(parser)


def add_task_arguments(parser) -> None:
    """--task and --instruction: the same options on eval, collect and demo."""
    from arm_act.sim.instructions import TASKS

    parser.add_argument("--task", choices=TASKS, default="box",
                        help="goal family of every episode: box (put the block in the box), stack, relation "
                             "(left of / right of / in front of / behind another block) or mix (drawn per episode "
                             "from its seed); docs/tasks.md")
    parser.add_argument("--instruction", metavar="TEXT",
                        help="the same instruction for every episode instead of the task's (any phrasing the "
                             "parser understands); an episode whose blocks do not fit it stops the run with the "
                             "reason")


def add_change_goal_argument(parser) -> None:
    """--change-goal AT_S:TO: the same option on eval and collect (sim.goal_change.GoalChange)."""
    parser.add_argument("--change-goal", metavar="AT_S:TO",
                        help="change the goal inside every in-process episode at AT_S sim seconds: TO is box "
                             "(another block into the box), stack (the named block onto another), relation, or an "
                             "instruction; success then means the new goal (docs/tasks.md)")


def settings_for(args) -> tuple[dict, str | None]:
    """The behaviour settings of this evaluation: each flag given, else the checkpoint's
    inference.json, else InferenceConfig's default. -> (settings, the file used or None)."""
    from arm_act.policy.inference_config import BEHAVIOUR, INFERENCE_FILE, InferenceConfig, load_inference_config

    recorded = None
    if args.policy != "expert" and Path(args.policy).is_dir():
        recorded = load_inference_config(args.policy)  # ValueError naming the file when it is bad
    base = (recorded or InferenceConfig()).to_dict()
    given = {name: getattr(args, name) for name in BEHAVIOUR if hasattr(args, name)}
    settings = {name: base[name] if value is None else value for name, value in given.items()}
    return settings, (str(Path(args.policy) / INFERENCE_FILE) if recorded is not None else None)


def add_assist_argument(parser) -> None:
    """--assist: the same switch on eval, demo and collect (policy_node's `assist`)."""
    add_setting(parser, "assist")


def add_setting(parser, name: str, **overrides) -> None:
    """The flag of one InferenceConfig setting: its default, help and range from the field."""
    from arm_act.policy.inference_config import describe_range, fields

    f = next(f for f in fields() if f.name == name)
    flag = "--" + name.replace("_", "-")
    limits = describe_range(f)
    help_text = f.metadata["help"] + (f"; {limits}" if limits and f.metadata["choices"] is None else "")
    if f.type in ("bool", bool):
        if overrides.get("default", False) is None:  # unset: the checkpoint's inference.json decides
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text + f" (policy_node's {name}; default: {CHECKPOINT_DEFAULT})")
        else:
            parser.add_argument(flag, action="store_true", help=help_text + f" (policy_node's {name})")
        return
    kind = {"int": int, "float": float}.get(f.type, str) if isinstance(f.type, str) else f.type
    shown = f"{CHECKPOINT_DEFAULT}, else {f.default}" if overrides.get("default", False) is None else "%(default)s"
    options = {"type": kind, "default": f.default, "help": help_text + f" (default: {shown})"}
    if f.metadata["choices"] is not None:
        options["choices"] = f.metadata["choices"]
    parser.add_argument(flag, **{**options, **overrides})


# The settings every run of a checkpoint takes (policy_node's parameters, InferenceConfig).
EVAL_SETTINGS = ("execution", "ensemble_m", "ensemble_m_after_change", "ensemble_after_change_s", "gripper", "threads",
                 "device", "backend", "max_joint_speed", "assist", "regrasps", "retry")
CHECKPOINT_DEFAULT = "the checkpoint's inference.json"


def add_policy_arguments(parser) -> None:
    """Options that only apply to a checkpoint policy (the runtime), derived from InferenceConfig.
    The behaviour settings (inference_config.BEHAVIOUR) left unset come from the checkpoint's
    inference.json, then from InferenceConfig's defaults (`settings_for`)."""
    from arm_act.policy.inference_config import BEHAVIOUR

    group = parser.add_argument_group("checkpoint policy")
    for name in EVAL_SETTINGS:
        add_setting(group, name, **({"default": None} if name in BEHAVIOUR else {}))
    add_setting(group, "latency_ticks", default=None,
                 help="control ticks before a chunk is usable (default: this machine's measured inference latency)")
    group.add_argument("--ideal", action="store_true", help="zero inference delay (ablation)")
    group.add_argument("--video", type=Path, help="directory for per-episode videos with attention")
    group.add_argument("--bags", type=Path, help="directory for a bag of every rollout")


def run(args) -> int:
    from arm_act.common.ray_pool import RayPoolError
    from arm_act.common.worker_pool import WorkerError
    from arm_act.eval.evaluate import EvalConfig, describe_grasp_precision, evaluate
    from arm_act.eval.in_process import PolicySettings
    from arm_act.policy.checkpoint import CheckpointError

    try:
        behaviour, recorded = settings_for(args)
        settings = PolicySettings(latency_ticks=args.latency_ticks, ideal=args.ideal, threads=args.threads,
                                  backend=args.backend, device=args.device, **behaviour)
        config = EvalConfig(
            policy=args.policy, episodes=args.episodes, seed=args.seed, blocks=args.blocks,
            camera_rate=args.camera_rate, control_rate=args.control_rate, time_limit=args.time_limit,
            over_ros=args.over_ros, video=args.video, bags=args.bags, settings=settings, ray=args.ray,
            live=args.live, compare_in_process=args.compare_in_process, logs=args.logs,
            real_time_factor=args.real_time_factor, workers=args.workers, task=args.task,
            instruction=args.instruction, phrasing=args.phrasing, change_goal=args.change_goal)
        if args.robustness is not None:
            return _robustness(args, config)
        summary = evaluate(config)
    except (CheckpointError, ValueError, RayPoolError, WorkerError) as exc:
        raise CommandError(str(exc)) from None
    except RuntimeError as exc:  # a live node that exited or stalled
        if not args.live:
            raise
        raise CommandError(str(exc)) from None
    text = json.dumps(summary, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
        return 0
    describe = summary["policy"]
    low, high = summary["ci95"]
    name = describe if isinstance(describe, str) else (
        f"{describe['checkpoint']} ({describe['execution']}, latency {describe['latency_ticks']} ticks "
        f"{_latency_source(describe)}, gripper {describe.get('gripper', 'continuous')}, "
        f"assist {'on' if describe.get('assist') else 'off'})")
    print(f"{name}: {summary['successes']}/{summary['episodes']} success "
          f"({summary['success_rate']:.1%}, 95% CI {low:.1%}-{high:.1%}) "
          f"in {summary['wall_time_s']:.0f} s")
    if recorded:
        print(f"  settings without a flag from {recorded}")
    for k, v in summary["by_blocks"].items():
        print(f"  {k} blocks: {v['success_rate']:.1%} of {v['episodes']}")
    for k, v in summary.get("by_family", {}).items():
        print(f"  {k}: {v['successes']}/{v['episodes']} ({v['success_rate']:.1%})")
    change = summary.get("goal_change")
    if change is not None:
        rate = change["new_goal_rate"]
        print(f"  goal change {change['change']}: {change['reached_new_goal']}/{change['episodes_changed']} reached "
              f"the new goal ({'-' if rate is None else f'{rate:.1%}'}); {change['ended_before']} ended before it, "
              f"{change['refused']} refused it")
    retried = summary.get("ray", {}).get("retried")
    if retried:
        print(f"  ray: {len(retried)} task(s) failed once and succeeded when run again: {retried}")
    if "lifted_named_block" in summary:
        print(f"  lifted the named block in {summary['lifted_named_block']}, another block in "
              f"{summary['lifted_other_block']} of {summary['episodes']} episodes")
    if "regrasp" in summary:
        regrasp = summary["regrasp"]
        print(f"  regrasp: {regrasp['missed_first_grasp']} missed first grasps, "
              f"{regrasp['succeeded_after_miss']} succeeded")
    if "grasp_precision" in summary:
        print(f"  {describe_grasp_precision(summary['grasp_precision'])}")
    if "live" in summary:
        _print_live(summary)
    if "target_error_first_cm_median" in summary:
        print(f"  target head: the named block is placed {summary['target_error_first_cm_median']:.1f} cm "
              "from where it is (median, first camera pair)")
    after = summary.get("target_after_change")
    if after:
        pull = (f", {100 * after['pull_first']:.0f} % of the way to the old goal's block"
                if "pull_first" in after else "")
        print(f"  after the goal change: the new goal's block is placed {after['first_cm']:.1f} cm from where "
              f"it is (median, first camera pair under the new goal){pull}")
    return 0


def _latency_source(describe: dict) -> str:
    """Where the evaluation's fixed latency came from, for the summary line."""
    if describe.get("ideal"):
        return "(ideal)"
    measured = describe.get("measured_latency_ms")
    return "(fixed)" if measured is None else f"(measured {measured:g} ms)"


def _print_live(summary: dict) -> None:
    live, totals = summary["live"], summary["live"]["totals"]
    print(f"  live: {live['wall_time_s']:.0f} s at real-time factor {live['real_time_factor']:g}, "
          f"load average {live['load_average_before'][0]:.2f} before, "
          f"{live['load_average_after'][0]:.2f} after ({live['cpus']} CPUs)")
    print(f"  real time: missed ticks {totals.get('missed_ticks')} (policy_node's count; the probe saw "
          f"{totals['missed_ticks_sim']} in sim time, {totals['missed_ticks_wall']} in wall time) "
          f"of {totals['commands']} commands; chunks later than 1 tick {totals.get('late_chunks')} of "
          f"{totals.get('chunks_timed')} (mean latency {totals.get('chunk_latency_ticks_mean')} ticks); "
          f"pairs without chunk {totals['pairs_without_chunk']} of {totals['camera_pairs']}; "
          f"inference p50 {totals['inference_ms_p50_median']} ms")
    compare = summary.get("compare")
    if compare:
        for side in ("live", "in_process"):
            rate = compare[side]
            low, high = rate["ci95"]
            print(f"  {side.replace('_', '-'):10s} {rate['successes']}/{rate['episodes']} "
                  f"({rate['success_rate']:.1%}, 95% CI {low:.1%}-{high:.1%})")
        print(f"  failed live only: {compare['failed_live_only']}; failed in process only: "
              f"{compare['failed_in_process_only']}; both: {compare['failed_both']}")


def _robustness(args, config) -> int:
    from arm_act.eval.robustness import compact, markdown_table, robustness_suite, variants

    def write(table: dict) -> None:  # after every variant: a long run keeps what it finished
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(table, indent=2) + "\n")

    names = variants(args.robustness)
    if not config.plain_task and "crowded" in names:  # before any variant runs, not after the others
        raise CommandError("the crowded world repeats colours and runs the box task only; "
                           "give --robustness another world, or no --task/--instruction")
    table = robustness_suite(config, names, with_expert=not args.no_expert, on_variant=write)
    if args.json:
        print(json.dumps(compact(table), indent=2))
    else:
        print(markdown_table(table))
    return 0


if __name__ == "__main__":
    from arm_act.cli.main import main

    sys.exit(main(["eval", *sys.argv[1:]]))
