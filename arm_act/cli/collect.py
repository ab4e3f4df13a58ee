"""`arm-act collect`: scripted-expert demonstrations as rosbag2 MCAP, one bag per episode.

    arm-act collect --episodes 200 --seed 0 --blocks 2-5 --out data/demos --workers 2

Episode i has seed S+i and a block count drawn from that seed (arm_act.common.episodes, the same
schedule as sim_node and `arm-act eval`); its bag is OUT/episode_<seed>, written in process
and in lockstep by run_episode with the expert agent (arm_act.bags.episode), with the topics
and messages the live system publishes, stamped with sim time. The expert's perturbation
generator is seeded from the episode seed, so a run is reproducible bag for bag whatever the
worker count. Failed expert episodes are kept, marked success: "false" in custom_data.

Expert takeover (DAgger-style data from the policy's own states):

    arm-act collect --policy checkpoints/default --handover 1-10 --episodes 400 --seed 300000 --out data/takeover

The policy drives each episode (in process, with the given latency in control ticks) until
a handover time drawn uniformly from the range (seeded by the episode seed); then the
scripted expert takes over from that state and finishes the task. The whole episode is
recorded; custom_data expert_from_s marks where the expert's commands start ("none" when the
episode ended first), and training uses only the frames from there on.
"""
from __future__ import annotations

import json
import multiprocessing
import sys
import time
from pathlib import Path

from arm_act.bags.episode import bag_name
from arm_act.cli.main import CommandError
from arm_act.common.episodes import episode_spec, parse_blocks
from arm_act.common.progress import progress_bar

_worker: dict = {}  # per worker process: the env and the options


def configure(parser) -> None:
    parser.add_argument("--episodes", type=int, required=True, help="number of episodes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode (then S+1, S+2, ...)")
    parser.add_argument("--blocks", default="2-5", help="block count N or range LO-HI")
    parser.add_argument("--out", type=Path, required=True, help="directory for the bags")
    parser.add_argument("--workers", type=int, default=1, help="parallel worker processes")
    parser.add_argument("--perturb", type=float, default=0.0,
                        help="expert perturbation probability per waypoint (recovery demonstrations)")
    parser.add_argument("--control-rate", type=int, default=50, help="Hz")
    parser.add_argument("--camera-rate", type=int, default=10, help="Hz")
    parser.add_argument("--compression", choices=("none", "zstd"), default="none", help="MCAP chunk compression")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    group = parser.add_argument_group("expert takeover")
    group.add_argument("--policy", type=Path, metavar="CKPT_DIR",
                       help="a checkpoint that drives each episode until the handover time")
    group.add_argument("--handover", metavar="LO-HI",
                       help="handover time range, sim seconds (with --policy; default 1-10)")
    group.add_argument("--latency-ticks", type=int,
                       help="control ticks before a chunk is usable (with --policy; default 1)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the complete bags already in --out and collect only the missing episodes "
                             "(a bag left incomplete by an interrupted run is set aside as <name>.incomplete)")


def _init_worker(options: dict) -> None:
    from arm_act.sim import ArmEnv, SimConfig

    config = SimConfig(control_rate_hz=options["control_rate"], camera_rate_hz=options["camera_rate"])
    _worker.update(options, env=ArmEnv(config))
    if options.get("policy"):
        from arm_act.policy.runtime import PolicyRuntime

        cameras = tuple(c.name for c in config.cameras)
        _worker["runtime"] = PolicyRuntime.from_checkpoint(options["policy"], threads=1, cameras=cameras,
                                                           image_size=config.cameras[0].height)


def _close_worker() -> None:
    env = _worker.pop("env", None)
    _worker.clear()  # the policy runtime and options too: the next run in this process starts clean
    if env is not None:
        env.close()


def collect_episode(spec) -> dict:
    """Run and record one expert episode in this process's env; returns its record."""
    import numpy as np

    from arm_act.bags.episode import EpisodeBagRecorder
    from arm_act.sim import ExpertConfig
    from arm_act.sim.rollout import ExpertAgent, run_episode

    env, perturb = _worker["env"], _worker["perturb"]
    # The same perturbation generator as `arm-act eval --policy expert` and run_expert_episodes.
    expert = ExpertAgent(ExpertConfig(perturb_prob=perturb), rng=np.random.default_rng(spec.seed + 1_000_003))
    agent, metadata = expert, {"expert": "scripted", "perturb_prob": perturb}
    if _worker.get("policy"):
        from arm_act.eval.in_process import PolicyAgent, TakeoverAgent

        lo, hi = _worker["handover"]
        handover = float(np.random.default_rng(spec.seed + 2_000_003).uniform(lo, hi))
        policy = PolicyAgent(_worker["runtime"], _worker["latency_ticks"], control_rate=env.config.control_rate_hz)
        agent = TakeoverAgent(policy, expert, handover)
        metadata.update(policy=_worker["policy"], handover_s=round(handover, 6))
    recorder = EpisodeBagRecorder.for_rollout(_worker["out"], env, spec, compression=_worker["compression"],
                                              **metadata)
    try:
        result = run_episode(env, agent, spec.seed, spec.n_blocks, render=True, on_tick=recorder.on_tick(env, agent))
    except BaseException as exc:
        recorder.abort(f"episode failed: {type(exc).__name__}: {exc}")
        raise
    finally:
        expert.close()
    record, final = {}, {}
    if agent is not expert:
        tick = agent.handover_tick
        final["expert_from_s"] = "none" if tick is None else repr(round(tick / env.config.control_rate_hz, 6))
        record["expert_from_s"] = None if tick is None else float(final["expert_from_s"])
    recorder.finish(result, **final)
    return {"seed": result.seed, "n_blocks": result.n_blocks, "status": result.status, "success": bool(result.success),
            "duration_s": round(float(result.duration), 4), "ticks": result.ticks, "frames": recorder.frames,
            "bag": str(recorder.path), "bytes": sum(f.stat().st_size for f in recorder.path.iterdir()), **record}


def _collect_in_worker(spec) -> dict:
    try:
        return collect_episode(spec)
    except Exception as exc:  # noqa: BLE001 - crosses the process boundary as one line
        raise RuntimeError(f"seed {spec.seed}: {type(exc).__name__}: {exc}") from None


def _resume(out: Path, specs, existing):
    """Split specs into those still to collect; incomplete bags are renamed, never deleted."""
    from arm_act.bags import BagError, bag_info

    done = set()
    for spec in existing:
        path = out / bag_name(spec.seed)
        try:
            complete = bag_info(path).complete
        except BagError:
            complete = False
        if complete:
            done.add(spec.seed)
        else:
            aside = path.with_name(path.name + ".incomplete")
            if aside.exists():
                raise CommandError(f"{aside} exists; remove it or move it away first")
            path.rename(aside)
    return [s for s in specs if s.seed not in done], len(done)


def _parse_handover(text: str) -> tuple[float, float]:
    try:
        lo, _, hi = text.partition("-")
        lo_s, hi_s = float(lo), float(hi or lo)
    except ValueError:
        raise CommandError(f"--handover {text!r} must be seconds LO-HI, e.g. 1-10") from None
    if not (0 <= lo_s <= hi_s and hi_s < float("inf")):
        raise CommandError(f"--handover {text!r} must satisfy 0 <= LO <= HI")
    return lo_s, hi_s


def _check_policy(args) -> None:
    """Load the checkpoint once here, so a bad one fails before any worker starts."""
    from arm_act.policy.checkpoint import CheckpointError
    from arm_act.policy.runtime import PolicyRuntime
    from arm_act.sim import SimConfig

    config = SimConfig(control_rate_hz=args.control_rate, camera_rate_hz=args.camera_rate)
    try:
        PolicyRuntime.from_checkpoint(args.policy, threads=1, cameras=tuple(c.name for c in config.cameras),
                                      image_size=config.cameras[0].height)
    except (CheckpointError, ValueError, OSError) as exc:
        raise CommandError(f"--policy {args.policy}: {exc}") from None


def run(args) -> int:
    from arm_act.sim import ExpertConfig, SimConfig

    try:  # validate everything before the first episode
        blocks = parse_blocks(args.blocks)
        SimConfig(control_rate_hz=args.control_rate, camera_rate_hz=args.camera_rate)
        ExpertConfig(perturb_prob=args.perturb)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if args.episodes < 1 or args.workers < 1:
        raise CommandError(f"--episodes {args.episodes} and --workers {args.workers} must be >= 1")
    handover = None
    if args.policy is None:
        given = [flag for flag, value in (("--handover", args.handover), ("--latency-ticks", args.latency_ticks))
                 if value is not None]
        if given:
            raise CommandError(f"{' and '.join(given)}: takeover episodes only; add --policy CKPT_DIR")
    else:
        args.handover = args.handover or "1-10"
        args.latency_ticks = 1 if args.latency_ticks is None else args.latency_ticks
        handover = _parse_handover(args.handover)
        if args.latency_ticks < 0:
            raise CommandError(f"--latency-ticks {args.latency_ticks} must be >= 0")
        _check_policy(args)
    specs = [episode_spec(i, args.seed, blocks) for i in range(args.episodes)]
    existing = [s for s in specs if (args.out / bag_name(s.seed)).exists()]
    if existing and not args.resume:
        names = [bag_name(s.seed) for s in existing]
        raise CommandError(f"{args.out} already holds {', '.join(names[:3])}{' ...' if len(names) > 3 else ''};"
                           " bags are never overwritten (--resume to keep them and collect the rest)")
    if existing:
        specs, skipped = _resume(args.out, specs, existing)
        print(f"resuming: {skipped} complete bags kept, {len(specs)} episodes to collect", file=sys.stderr)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"cannot create {args.out}: {exc.strerror or exc}") from None
    options = {"out": str(args.out), "perturb": args.perturb, "control_rate": args.control_rate,
               "camera_rate": args.camera_rate, "compression": None if args.compression == "none" else "zstd",
               "policy": None if args.policy is None else str(args.policy), "handover": handover,
               "latency_ticks": args.latency_ticks}

    started = time.monotonic()
    records = []
    with progress_bar(len(specs), "collect", unit="ep") as bar:
        def done(record: dict) -> None:
            records.append(record)
            bar.update(1)
            bar.set_postfix(success=f"{sum(r['success'] for r in records)}/{len(records)}")

        try:
            if args.workers == 1:
                _init_worker(options)
                try:
                    for spec in specs:
                        done(collect_episode(spec))
                finally:
                    _close_worker()
            else:
                # spawn: PyBullet and DDS state must not be forked; one env per worker.
                context = multiprocessing.get_context("spawn")
                with context.Pool(min(args.workers, len(specs)), _init_worker, (options,)) as pool:
                    for record in pool.imap_unordered(_collect_in_worker, specs):
                        done(record)
        except Exception as exc:  # noqa: BLE001 - BagError, sim errors, a worker's RuntimeError
            raise CommandError(f"collect stopped: {exc}") from None

    records.sort(key=lambda r: r["seed"])
    summary = {
        "out": str(args.out), "episodes": len(records), "successes": sum(r["success"] for r in records),
        "frames": sum(r["frames"] for r in records), "ticks": sum(r["ticks"] for r in records),
        "bytes": sum(r["bytes"] for r in records), "wall_time_s": round(time.monotonic() - started, 2),
        "seed": args.seed, "blocks": args.blocks, "perturb": args.perturb, "workers": args.workers,
        "policy": options["policy"], "handover": args.handover if args.policy is not None else None,
        "episodes_detail": records,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['episodes']} episodes, {summary['successes']} successful, {summary['frames']} frames, "
              f"{summary['bytes'] / 1e6:.1f} MB in {args.out}, {summary['wall_time_s']:.1f} s")
        failed = [r["seed"] for r in records if not r["success"]]
        if failed:
            print(f"failed expert episodes (kept, success: false): seeds {failed}")
    return 0


if __name__ == "__main__":
    from arm_act.cli.main import main

    sys.exit(main(["collect", *sys.argv[1:]]))
