"""Add the colour reference of policy/colour.py to a checkpoint trained before training saved
one (checkpoints/default was): the fixed camera's per-channel median over the first frames
of plain-world episodes, what `arm-act train` now computes from its bags' first frames.

    python benchmarks/colour_reference.py CHECKPOINT [--episodes 40] [--seed 0]

The episodes are rendered by the simulator the bags were recorded in, with the seeds of
the training demonstrations (from 0), as a bag's first frame is (the arm at home). Only
normalization.json changes; the weights, and their checksum, stay as they are. Prints the
reference (0-1 and 0-255).
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arm_act.policy.checkpoint import load_checkpoint, save_normalization
from arm_act.policy.colour import channel_medians
from arm_act.sim.env import ArmEnv


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    _, normalizer, config = load_checkpoint(args.checkpoint)
    camera = config.cameras[0]
    frames = []
    with ArmEnv() as env:
        for i in range(args.episodes):
            env.reset(args.seed + i, 2 + i % 4)  # 2-5 blocks, as the demonstrations
            frames.append(env.render()[camera])
    median = channel_medians(np.stack(frames))
    out = normalizer.with_image_reference(camera, median)
    save_normalization(args.checkpoint, out)
    load_checkpoint(args.checkpoint)  # it still loads, strictly
    print(f"{args.checkpoint}: image_reference {camera} {median.round(4).tolist()} "
          f"= {(median * 255).round(1).tolist()} / 255")
    return 0


if __name__ == "__main__":
    sys.exit(main())
