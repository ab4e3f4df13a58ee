"""A checkpoint on given seeds through the Gymnasium env, twice: with the joint state as the env
gives it (float64, what `arm-act eval` uses) and rounded to float32, which is what LeRobot's
`preprocess_observation` hands a policy. Shows whether the two evaluation loops differ only by
that rounding on seeds where they disagree.

    .venv/bin/python benchmarks/float32_state.py --checkpoint checkpoints/default 100040 100079 100136 \
        --out benchmarks/results/lerobot_peer/float32_state.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import gymnasium
import numpy as np

import arm_act.gym  # noqa: F401 - registers arm_act/PickPlace-v0
from arm_act.gym.drivers import PolicyDriver


class Float32StateDriver(PolicyDriver):
    """PolicyDriver whose agent sees the joint positions rounded to float32 and back."""

    def observation(self, obs: dict, info: dict):
        seen = super().observation(obs, info)
        js = seen.joint_state
        rounded = dataclasses.replace(js, position=js.position.astype(np.float32).astype(np.float64))
        return dataclasses.replace(seen, joint_state=rounded)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seeds", type=int, nargs="+")
    parser.add_argument("--checkpoint", type=Path, default=Path("checkpoints/default"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    env = gymnasium.make("arm_act/PickPlace-v0")
    rows = []
    for name, cls in (("float64", PolicyDriver), ("float32", Float32StateDriver)):
        driver = cls.load(env, args.checkpoint)  # a fresh agent per pass
        for seed in args.seeds:
            record = driver.run_episode(seed=seed)
            rows.append({"state": name, "seed": seed, "status": record["status"], "steps": record["steps"]})
            print(f"{name} {seed}: {record['status']} after {record['steps']} steps", flush=True)
    env.close()
    if args.out:
        args.out.write_text(json.dumps({"checkpoint": str(args.checkpoint), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
