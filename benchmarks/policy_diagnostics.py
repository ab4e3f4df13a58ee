"""The policy diagnostics behind docs/training.md's "Letting go" section.

    python benchmarks/policy_diagnostics.py labels DIR... [--cache DIR]
    python benchmarks/policy_diagnostics.py probe CKPT TAKEOVER_DIR [--cache DIR] [--after 6]
    python benchmarks/policy_diagnostics.py grasps CKPT --seeds 100018 100026 ... [--blocks 2-5]
    python benchmarks/policy_diagnostics.py trace CKPT --seed 100035 [--assist] [--before 30]

labels: in every successful demonstration, the frames where the named block is held low
over the box (fingers on a block, block centre 4-9 cm high, within 5 cm of the box centre),
and what the chunk labels say at steps 10/20/30/40: gripper open, closed, or past the
episode's end (no label unless training with hold_after_end).

probe: the checkpoint's predicted gripper opening (mm, every 5th chunk step) at the first
three expert frames of takeover episodes whose expert took over after --after seconds (the
policy that drove them was hovering over the box by then), beside the step at which the
expert actually opens.

grasps: closed-loop episodes of the given evaluation seeds (in process, latency 1 tick, as
`arm-act eval`), and where the grasp point was relative to the named block when the
gripper command first closed (cm; x points away from the robot), and whether the named
block was ever lifted.

trace: one closed-loop episode, tick by tick around the first close of the gripper command:
the grasp point minus the named block (cm), the gripper command and fingers (mm), and the
target head's newest estimate minus the block (cm). Without --assist the chunks' own commands
(as `arm-act eval` by default); docs/training.md, "Aim correction", quotes seed 100035.
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arm_act.bags import bag_info, find_bags
from arm_act.data.dataset import load_dataset
from arm_act.sim.config import SimConfig

OPEN = 0.02  # m: a gripper command above this is "open" (GRIPPER_MAX is 0.04)


def held_over_box(episode, i: int, box_xy: np.ndarray) -> bool:
    fingers, target = episode.frame_state[i, 7], episode.frame_target[i]
    return bool(0.012 < fingers < 0.036 and 0.04 < target[2] < 0.09
                and np.all(np.abs(target[:2] - box_xy) < 0.05))


def labels(args) -> None:
    box_xy = np.asarray(SimConfig().box_center, dtype=np.float32)
    episodes = [e for e in load_dataset(args.dirs, args.cache, progress=False) if e.success]
    counts: collections.Counter = collections.Counter()
    frames = 0
    for e in episodes:
        for i, tick in enumerate(e.frame_ticks):
            if not held_over_box(e, i, box_xy):
                continue
            frames += 1
            for step in (10, 20, 30, 40):
                if tick + step >= e.n_ticks:
                    counts[step, "past the end"] += 1
                else:
                    counts[step, "open" if e.commands[tick + step, 7] > OPEN else "closed"] += 1
    print(f"{len(episodes)} successful episodes, {frames} frames with the block held low over the box")
    print("chunk step | open | closed | past the end")
    for step in (10, 20, 30, 40):
        print(f"{step:10d} | {counts[step, 'open']:4d} | {counts[step, 'closed']:6d} | "
              f"{counts[step, 'past the end']:d}")


def probe(args) -> None:
    from arm_act.policy.runtime import PolicyRuntime

    runtime = PolicyRuntime.from_checkpoint(args.checkpoint, threads=1)
    late = []
    for bag in find_bags([args.takeover]):
        custom = bag_info(bag).custom_data
        expert_from = custom.get("expert_from_s", "none")
        if expert_from != "none" and float(expert_from) > args.after and custom.get("success") == "true":
            late.append(bag)
    late = late[:args.episodes]
    if not late:
        raise SystemExit(f"no successful takeover bag under {args.takeover} with expert_from_s > {args.after}")
    for e in load_dataset(late, args.cache, progress=False):
        for i in range(min(3, e.n_frames)):
            tick = e.frame_ticks[i]
            images = {camera: e.images[i, c] for c, camera in enumerate(e.cameras)}
            chunk = runtime.predict_chunk(images, e.frame_state[i], e.instruction).actions
            future = e.commands[tick:tick + len(chunk), 7]
            opens = int(np.argmax(future > OPEN)) if (future > OPEN).any() else None
            print(f"seed {e.seed} frame {i}: expert opens at step {opens}; predicted opening (mm) at steps "
                  f"0,5,..: {np.round(chunk[::5, 7] * 1000).astype(int).tolist()}")


def grasps(args) -> None:
    from arm_act.common.episodes import episode_spec, parse_blocks
    from arm_act.eval.in_process import LIFTED_Z, PolicyAgent, named_block_position
    from arm_act.policy.runtime import PolicyRuntime
    from arm_act.sim import ArmEnv
    from arm_act.sim.rollout import run_episode

    runtime = PolicyRuntime.from_checkpoint(args.checkpoint, threads=1)
    env = ArmEnv(SimConfig())
    blocks = parse_blocks(args.blocks)
    try:
        for seed in args.seeds:
            spec = episode_spec(seed - args.first_seed, args.first_seed, blocks)
            agent = PolicyAgent(runtime, 1)
            first_close, lifted = None, False

            def on_tick(obs, cmd):
                nonlocal first_close, lifted
                block = named_block_position(obs.objects, obs.instruction)
                lifted = lifted or bool(block is not None and block[2] > LIFTED_Z)
                if first_close is None and cmd.gripper < OPEN and block is not None:
                    first_close = (obs.time, env.grasp_point() - block)

            result = run_episode(env, agent, spec.seed, spec.n_blocks, render=True, on_tick=on_tick)
            where = ("never closed" if first_close is None else
                     f"first close at t={first_close[0]:.2f} s, grasp point - block = "
                     f"{np.round(first_close[1] * 100, 1).tolist()} cm")
            print(f"seed {seed}: {result.status}; {where}; named block {'lifted' if lifted else 'not lifted'}")
    finally:
        env.close()


def trace(args) -> None:
    from arm_act.common.episodes import episode_spec, parse_blocks
    from arm_act.eval.in_process import PolicyAgent, named_block_position
    from arm_act.policy.runtime import PolicyRuntime
    from arm_act.sim import ArmEnv
    from arm_act.sim.rollout import run_episode

    runtime = PolicyRuntime.from_checkpoint(args.checkpoint, threads=1)
    spec = episode_spec(args.seed - args.first_seed, args.first_seed, parse_blocks(args.blocks))
    agent = PolicyAgent(runtime, 1, assist=args.assist)
    rows: list[str] = []
    closed_at = None
    with ArmEnv(SimConfig()) as env:
        def on_tick(obs, cmd):
            nonlocal closed_at
            block = named_block_position(obs.objects, obs.instruction)
            if block is None:
                return
            pred = agent.selector.last_prediction
            guess = "-" if pred is None or pred.target is None else np.round((pred.target - block) * 100, 1).tolist()
            offset = np.round((env.grasp_point() - block) * 100, 1).tolist()
            rows.append(f"t={obs.time:5.2f} s  grasp point - block {offset}"
                        f" cm  command {cmd.gripper * 1000:4.1f} mm  fingers {obs.joint_state.position[7] * 1000:4.1f}"
                        f" mm  estimate - block {guess} cm")
            if closed_at is None and cmd.gripper < OPEN:
                closed_at = len(rows) - 1

        result = run_episode(env, agent, spec.seed, spec.n_blocks, render=True, on_tick=on_tick)
    print(f"seed {spec.seed} ({spec.n_blocks} blocks), assist {'on' if args.assist else 'off'}: {result.status}")
    if closed_at is None:
        print("the gripper command never closed")
        return
    print("\n".join(rows[max(0, closed_at - args.before): closed_at + 10]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("labels")
    p.add_argument("dirs", nargs="+", type=Path)
    p.add_argument("--cache", type=Path, default=Path("runs/.cache"))
    p = sub.add_parser("probe")
    p.add_argument("checkpoint", type=Path)
    p.add_argument("takeover", type=Path)
    p.add_argument("--cache", type=Path, default=Path("runs/.cache"))
    p.add_argument("--after", type=float, default=6.0, help="only handovers after this many seconds")
    p.add_argument("--episodes", type=int, default=6)
    p = sub.add_parser("grasps")
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--blocks", default="2-5", help="as in arm-act eval (the block count is drawn from the seed)")
    p.add_argument("--first-seed", type=int, default=100000, help="the evaluation's --seed")
    p = sub.add_parser("trace")
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--seed", type=int, required=True, help="an evaluation seed (the block count is drawn from it)")
    p.add_argument("--blocks", default="2-5")
    p.add_argument("--first-seed", type=int, default=100000, help="the evaluation's --seed")
    p.add_argument("--assist", action="store_true", help="with the hand-written assist (policy_node's assist)")
    p.add_argument("--before", type=int, default=30, help="ticks shown before the first close")
    args = parser.parse_args()
    {"labels": labels, "probe": probe, "grasps": grasps, "trace": trace}[args.command](args)


if __name__ == "__main__":
    main()
