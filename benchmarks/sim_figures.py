"""Sim performance figures: render ms per camera pair and real-time factor.

    python benchmarks/sim_figures.py [--renders 50] [--seconds 4] [--save /tmp/sim_frames]

Prints, for the default config (arm drawn with its collision meshes) and for the Panda's
original visual meshes: median and p99 ms per render() of all cameras. Then the real-time
factor (simulated s per wall s) of an expert episode with physics only, and with camera
frames at the configured camera rate. --save writes one PNG per camera (4x upscaled).
CPU timings are noisy on a shared machine: compare runs made back to back.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arm_act.sim import ArmEnv, SimConfig
from arm_act.sim.rollout import ExpertAgent, run_episode


def render_ms(config: SimConfig, renders: int, seed: int = 0) -> np.ndarray:
    """Wall ms of `renders` env.render() calls, the arm mid-motion above the blocks."""
    env = ArmEnv(config)
    try:
        env.reset(seed=seed, n_blocks=5)
        q = env.joint_state().position[:7]
        out = []
        for k in range(renders):
            env.apply_command(q + 0.1 * np.sin(0.1 * k), 0.04)
            env.step()
            t0 = time.perf_counter()
            env.render()
            out.append((time.perf_counter() - t0) * 1e3)
        return np.array(out)
    finally:
        env.close()


def real_time_factor(config: SimConfig, render: bool, seeds: range) -> float:
    env = ArmEnv(config)
    sim_s = wall_s = 0.0
    try:
        for seed in seeds:
            agent = ExpertAgent()
            t0 = time.perf_counter()
            result = run_episode(env, agent, seed, 5, render=render)
            wall_s += time.perf_counter() - t0
            sim_s += result.duration
            agent.close()
    finally:
        env.close()
    return sim_s / wall_s


def save_frames(config: SimConfig, out_dir: Path, seed: int) -> None:
    import cv2  # only needed here

    env = ArmEnv(config)
    try:
        env.reset(seed=seed, n_blocks=6)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, img in env.render().items():
            big = cv2.resize(img, (img.shape[1] * 4, img.shape[0] * 4), interpolation=cv2.INTER_NEAREST)
            cv2.imwrite(str(out_dir / f"seed{seed}_{name}.png"), big[:, :, ::-1])
            print(f"wrote {out_dir / f'seed{seed}_{name}.png'}")
    finally:
        env.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renders", type=int, default=50)
    parser.add_argument("--episodes", type=int, default=3, help="expert episodes for the real-time factor")
    parser.add_argument("--size", type=int, default=96, help="camera width = height (px)")
    parser.add_argument("--save", type=Path, default=None, help="directory for PNGs of each camera")
    args = parser.parse_args()

    base = SimConfig()
    cams = tuple(dataclasses.replace(c, width=args.size, height=args.size) for c in base.cameras)
    base = dataclasses.replace(base, cameras=cams)
    names = "+".join(c.name for c in cams)
    for label, cfg in (("collision meshes (default)", base),
                       ("visual meshes", dataclasses.replace(base, render_collision_meshes=False))):
        ms = render_ms(cfg, args.renders)
        print(f"render {names} {args.size}x{args.size}, {label}: median {np.median(ms):.1f} ms, "
              f"p99 {np.percentile(ms, 99):.1f} ms per pair ({args.renders} renders)")
    seeds = range(args.episodes)
    print(f"real-time factor, expert, 5 blocks, physics only: {real_time_factor(base, False, seeds):.1f}x")
    print(f"real-time factor, expert, 5 blocks, cameras at {base.camera_rate_hz} Hz: "
          f"{real_time_factor(base, True, seeds):.1f}x")
    if args.save is not None:
        save_frames(base, args.save, seed=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
