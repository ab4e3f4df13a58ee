"""The release diagnostics behind the README's "Letting go" section.

    python benchmarks/release_diagnostics.py labels DIR... [--cache DIR]
    python benchmarks/release_diagnostics.py probe CKPT TAKEOVER_DIR [--cache DIR] [--after 6]

labels: in every successful demonstration, the frames where the named block is held low
over the box (fingers on a block, block centre 4-9 cm high, within 5 cm of the box centre),
and what the chunk labels say at steps 10/20/30/40: gripper open, closed, or past the
episode's end (no label unless training with hold_after_end).

probe: the checkpoint's predicted gripper opening (mm, every 5th chunk step) at the first
three expert frames of takeover episodes whose expert took over after --after seconds (the
policy that drove them was hovering over the box by then), beside the step at which the
expert actually opens.
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arm_act.bagio import bag_info  # noqa: E402
from arm_act.dataset import find_bags, load_dataset  # noqa: E402
from sim.config import SimConfig  # noqa: E402

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
        print(f"{step:10d} | {counts[step, 'open']:4d} | {counts[step, 'closed']:6d} | {counts[step, 'past the end']:d}")


def probe(args) -> None:
    from policy.runtime import PolicyRuntime

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
    args = parser.parse_args()
    labels(args) if args.command == "labels" else probe(args)


if __name__ == "__main__":
    main()
