"""How far the `lighting` world moves the camera images, and how much of that the colour
balance (policy/colour.py) undoes (docs/training.md, "Colour balance").

For each layout the same seed is rendered under the training light and under the episode's
drawn light; the mean absolute pixel difference (of 255) between the two is printed for each
camera as rendered and after the balance, which scales both cameras by the front camera's
median gains, as the runtime does. Then what the balance costs: the balance alone on a
camera pair of the checkpoint's size (a lit one, so the gains are not 1), 3 rounds of 1,000
calls on one thread, p50 and p99 in ms.

    python benchmarks/colour_shift.py [CHECKPOINT] [--layouts 12] [--seed 400000]
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arm_act.common.paths import default_checkpoint
from arm_act.policy.checkpoint import load_checkpoint
from arm_act.policy.colour import ColourBalance
from arm_act.sim.env import ArmEnv
from arm_act.sim.perturb import perturbation


def _pixels(images: dict[str, np.ndarray], cameras) -> torch.Tensor:
    stacked = torch.from_numpy(np.stack([images[c] for c in cameras]))  # (C, H, W, 3)
    return stacked.permute(0, 3, 1, 2).float().div(255.0)[None]  # (1, C, 3, H, W)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path, nargs="?", default=default_checkpoint())
    parser.add_argument("--layouts", type=int, default=12)
    parser.add_argument("--seed", type=int, default=400000)
    args = parser.parse_args()
    _, normalizer, config = load_checkpoint(args.checkpoint)
    reference = normalizer.image_reference
    if reference is None:
        print(f"{args.checkpoint} has no colour reference (benchmarks/colour_reference.py adds one)")
        return 1
    cameras = list(config.cameras)
    balance = ColourBalance(cameras.index(reference["camera"]), reference["median"])
    rows = []
    with ArmEnv() as plain, ArmEnv(perturbation=perturbation("lighting")) as lit:
        for i in range(args.layouts):
            seed, blocks = args.seed + i, 2 + i % 4
            plain.reset(seed, blocks)
            lit.reset(seed, blocks)
            x, y = _pixels(plain.render(), cameras), _pixels(lit.render(), cameras)
            balanced = balance(y)
            before = ((y - x).abs().mean(dim=(0, 2, 3, 4)) * 255).tolist()  # per camera
            after = ((balanced - x).abs().mean(dim=(0, 2, 3, 4)) * 255).tolist()
            rows.append((before, after))
            gains = " ".join(f"{g:.2f}" for g in balance.last_gains.tolist())
            cells = "  ".join(f"{c} {b:5.1f} -> {a:4.1f}" for c, b, a in zip(cameras, before, after, strict=True))
            print(f"seed {seed}: gains {gains}  {cells}")
    before = np.array([r[0] for r in rows])
    after = np.array([r[1] for r in rows])
    print(f"mean |difference| (of 255) over {len(rows)} layouts: as rendered {before.min():.1f}-{before.max():.1f} "
          f"(median {np.median(before):.1f}), balanced {after.min():.1f}-{after.max():.1f} "
          f"(median {np.median(after):.1f})")
    torch.set_num_threads(1)
    rounds = []
    for _ in range(3):
        times = []
        for _ in range(1000):
            start = time.perf_counter()
            balance(y)
            times.append(time.perf_counter() - start)
        rounds.append((np.percentile(times, 50) * 1e3, np.percentile(times, 99) * 1e3))
    print("balance of one camera pair, ms per round (p50, p99): "
          + ", ".join(f"({a:.3f}, {b:.3f})" for a, b in rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
