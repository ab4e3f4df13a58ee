"""A checkpoint alone with the temporal ensembling's weights tilted: m < 0 trusts newer chunks
more (ACT's exp(-m*i), i = 0 the oldest), to tell whether the grasp misses come from averaging
in chunks predicted from older, farther views. Runs on tuning seeds from 700000, never used in
training or in the published evaluations, in this process (m is set on the loaded runtime;
the nodes and `arm-act eval` accept only m >= 0).

    python benchmarks/ensemble_tilt.py CKPT M EPISODES OUT.json
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arm_act.common.episodes import episode_spec, parse_blocks
from arm_act.eval.config import EvalConfig
from arm_act.eval.evaluate import run_one
from arm_act.eval.in_process import PolicyRunner, PolicySettings
from arm_act.eval.stats import describe_grasp_precision, summarize

SEED = 700000


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    checkpoint, m, episodes, out = argv[0], float(argv[1]), int(argv[2]), Path(argv[3])
    config = EvalConfig(policy=checkpoint, episodes=episodes, seed=SEED, blocks="2-5",
                        settings=PolicySettings(latency_ticks=1, threads=1))
    runner = PolicyRunner.load(Path(checkpoint), config.sim_config(), config.settings)
    runner.runtime.executor.m = m
    env = config.make_env()
    try:
        records = [run_one(runner, env, episode_spec(i, SEED, parse_blocks("2-5"))) for i in range(episodes)]
    finally:
        env.close()
    summary = summarize(records, {"ensemble_m": m, "seed": SEED})
    print(f"m={m}: {summary['successes']}/{episodes}; {describe_grasp_precision(summary['grasp_precision'])}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
