"""What a convolutional stem costs a training step, on one thread in one process.

Part 1: the network of config/train_default.json with each stem in STEMS, forward and
backward at batch 16 (one data-parallel process's share of the recipe's batch 32), the
variants alternating over 3 rounds, so a machine that slows down slows them alike. Prints
each round's median and the ratio to the network without a stem, the worst round last.

Part 2: the patch embedding with the stem [8, 16] on such a batch (32 images), the stem's
input in the default layout against channels-last (what policy.tokens.PatchEmbedding passes).

    python benchmarks/stem_cost.py [OUT.json]
"""
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arm_act.policy.config import PolicyConfig
from arm_act.policy.model import ACTPolicy
from arm_act.policy.tokens import PatchEmbedding, patchify

ROOT = Path(__file__).resolve().parents[1]
STEMS = ((), (8, 16), (16, 32))
ROUNDS, STEPS, BATCH = 3, 8, 16


def median_ms(fn, steps: int) -> float:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def network_rounds() -> dict[str, list[float]]:
    base = json.loads((ROOT / "config" / "train_default.json").read_text())["policy"]
    g = torch.Generator().manual_seed(0)
    images, state = torch.rand(BATCH, 2, 3, 96, 96, generator=g), torch.randn(BATCH, 9, generator=g)
    ids = torch.ones(BATCH, 8, dtype=torch.long)
    mask = torch.ones(BATCH, 8, dtype=torch.bool)
    models = {}
    for stem in STEMS:
        torch.manual_seed(0)
        models[str(list(stem))] = ACTPolicy(PolicyConfig.from_dict({**base, "stem_channels": list(stem)}, partial=True))
    out = {name: [] for name in models}
    for _ in range(ROUNDS):
        for name, model in models.items():
            out[name].append(median_ms(lambda m=model: m(images, state, ids, mask).actions.sum().backward(), STEPS))
    return out


def stem_layouts(channels=(8, 16)) -> dict[str, list[float]]:
    """The patch embedding with a stem, forward and backward; PatchEmbedding.forward's steps,
    with the stem's input in either layout."""
    embed = PatchEmbedding(2, 96, 16, 128, channels)
    x = torch.rand(BATCH, 2, 3, 96, 96, generator=torch.Generator().manual_seed(0))

    def run(channels_last: bool) -> None:
        flat = x.flatten(0, 1) * 2.0 - 1.0
        if channels_last:
            flat = flat.contiguous(memory_format=torch.channels_last)
        maps = embed.stem(flat).unflatten(0, (BATCH, 2))
        embed.proj(patchify(maps, embed.patch_size)).sum().backward()

    out = {"default": [], "channels_last": []}
    for _ in range(ROUNDS):
        for name in out:
            out[name].append(median_ms(lambda n=name: run(n == "channels_last"), 20))
    return out


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    network = network_rounds()
    base = network["[]"]
    print(f"network forward + backward, batch {BATCH}, 1 thread: median ms per round")
    for name, rounds in network.items():
        ratios = [r / b for r, b in zip(rounds, base, strict=True)]
        print(f"  stem {name}: {[round(r, 1) for r in rounds]}, against none {[round(r, 3) for r in ratios]}, "
              f"worst {max(ratios):.3f}")
    layouts = stem_layouts()
    ratios = [d / c for d, c in zip(layouts["default"], layouts["channels_last"], strict=True)]
    default, last = ([round(r, 1) for r in layouts[k]] for k in ("default", "channels_last"))
    print(f"patch embedding with stem [8, 16], {2 * BATCH} images: default layout {default} ms, "
          f"channels-last {last} ms, speed-up {[round(r, 2) for r in ratios]}")
    if len(argv) > 1:
        Path(argv[1]).write_text(json.dumps({"network_ms": network, "stem_layout_ms": layouts,
                                             "batch": BATCH, "rounds": ROUNDS, "threads": 1}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
