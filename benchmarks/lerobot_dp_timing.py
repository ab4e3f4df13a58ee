"""The time of one action chunk of LeRobot's Diffusion Policy at its defaults, with our inputs
(two 96x96 cameras, 9 joint positions, 8 actions), batch 1, 1 thread, from random weights (the
time does not depend on them); and its parameter count. Runs in the LeRobot virtual environment
of benchmarks/lerobot_proof.py, with `diffusers` installed (`lerobot[diffusion]`):

    LEROBOT_VENV/bin/python benchmarks/lerobot_dp_timing.py --repeats 3 \
        --out benchmarks/results/lerobot_peer/diffusion_timing.json

It tells whether training and evaluating the peer on this machine is possible at all: an
episode is up to 1000 control ticks, a chunk is n_action_steps of them.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--inference-steps", type=int, default=None, help="default: LeRobot's (the training steps)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy

    torch.manual_seed(0)
    torch.set_num_threads(1)
    cameras = ("front", "wrist")
    inputs = {"observation.state": PolicyFeature(FeatureType.STATE, (9,)),
              **{f"observation.images.{c}": PolicyFeature(FeatureType.VISUAL, (3, 96, 96)) for c in cameras}}
    config = DiffusionConfig(input_features=inputs, output_features={"action": PolicyFeature(FeatureType.ACTION, (8,))},
                             device="cpu", pretrained_backbone_weights=None, num_inference_steps=args.inference_steps)
    policy = DiffusionPolicy(config).eval()
    n = config.n_obs_steps
    batch = {"observation.state": torch.randn(1, n, 9),
             **{f"observation.images.{c}": torch.rand(1, n, 3, 96, 96) for c in cameras}}
    policy.reset()
    times = []
    with torch.inference_mode():
        policy.predict_action_chunk(batch)  # warm-up
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            chunk = policy.predict_action_chunk(batch)
            times.append((time.perf_counter() - t0) * 1e3)
    steps = config.num_inference_steps or config.num_train_timesteps
    p50 = statistics.median(times)
    result = {"policy": "lerobot DiffusionPolicy, defaults, random weights", "inference_steps": steps,
              "horizon": config.horizon, "n_action_steps": config.n_action_steps, "chunk": list(chunk.shape),
              "parameters": sum(p.numel() for p in policy.parameters()), "threads": 1,
              "chunk_ms": [round(t, 1) for t in times], "chunk_ms_p50": round(p50, 1),
              "episode_min_at_1000_ticks": round(1000 / config.n_action_steps * p50 / 60e3, 1)}
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
