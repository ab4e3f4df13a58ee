"""A checkpoint alone with its chunks executed differently, to tell which misses come from the
chunk executor rather than from the network.

- `M`: the temporal ensembling's weights exp(-m*i), i = 0 the oldest chunk (ACT's rule),
  for the whole episode, a goal change included. m < 0 trusts newer chunks more; the nodes
  and `arm-act eval` accept only m >= 0 for `ensemble_m`, so m is set on the loaded runtime
  here.
- `--horizon-ticks N`: average only the chunks that started in the last N control ticks.
- `--execution queue`: no averaging, the newest chunk only.
- `--world NAME`: a robustness world of arm_act.sim.perturb (`push`: the block moved as the
  gripper nears it), drawn per episode from its seed.
- `--task FAMILY`, `--change-goal AT_S:TO`: as `arm-act eval` takes them (a goal changed
  mid-episode: the chunks after the change are executed this way too).
- `--after-change M2 [--window-s W]`: from a goal change on, m is M2 (the runtime's
  `ensemble_m_after_change`); with `--window-s`, only for W seconds of control ticks from
  the first tick after the change, then M again (`ensemble_after_change_s`).

Runs on tuning seeds from 700000 by default, never used in training or in the published
evaluations, in this process, with the latency fixed at 1 control tick.

    python benchmarks/ensemble_tilt.py CKPT M EPISODES OUT.json [--world push]
        [--horizon-ticks 15] [--execution queue] [--seed 700000] [--task box]
        [--change-goal 0.5:box] [--after-change -1 --window-s 1.5]
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arm_act.common.episodes import episode_spec, parse_blocks
from arm_act.eval.config import EvalConfig
from arm_act.eval.evaluate import run_one
from arm_act.eval.in_process import PolicyRunner, PolicySettings
from arm_act.eval.stats import describe_grasp_precision, summarize
from arm_act.policy.runtime import TemporalEnsembler


class _HorizonEnsembler(TemporalEnsembler):
    """Temporal ensembling over the chunks that started in the last `horizon` ticks only,
    with the base's weights (its m, which may be < 0 here)."""

    def __init__(self, base: TemporalEnsembler, horizon: int):
        super().__init__(0.0, base.chunk_size, base.action_dim, base.interval_ticks)
        self.m = base.m
        self.horizon = int(horizon)

    def action(self, tick: int):
        self._chunks = [(s, c) for s, c in self._chunks if s >= tick - self.horizon]
        return super().action(tick)


def set_ensembling(runtime, m: float, horizon_ticks: int | None = None, after_change: float | None = None,
                   window_s: float | None = None) -> None:
    """Ensemble with m on a loaded PolicyRuntime, through each episode's reset, which puts the
    runtime's m back on the executor; from a goal change on with `after_change` (the runtime's
    m_after_change; None: m), for `window_s` seconds when given. horizon_ticks: average only
    the chunks of the last N ticks."""
    runtime.m = runtime.executor.m = float(m)
    runtime.m_after_change = float(m) if after_change is None else float(after_change)
    runtime.after_change_s = window_s
    if horizon_ticks is not None:
        runtime.executor = _HorizonEnsembler(runtime.executor, horizon_ticks)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("m", type=float)
    parser.add_argument("episodes", type=int)
    parser.add_argument("out", type=Path)
    parser.add_argument("--world", default=None, help="a robustness world (push, lighting, ...)")
    parser.add_argument("--horizon-ticks", type=int, default=None)
    parser.add_argument("--execution", choices=("ensemble", "queue"), default="ensemble")
    parser.add_argument("--seed", type=int, default=700000)
    parser.add_argument("--task", default="box")
    parser.add_argument("--change-goal", default=None, metavar="AT_S:TO")
    parser.add_argument("--after-change", type=float, default=None, metavar="M2")
    parser.add_argument("--window-s", type=float, default=None, metavar="W")
    args = parser.parse_args(argv)
    config = EvalConfig(policy=args.checkpoint, episodes=args.episodes, seed=args.seed, blocks="2-5",
                        robustness=args.world, task=args.task, change_goal=args.change_goal,
                        settings=PolicySettings(latency_ticks=1, threads=1, execution=args.execution, assist=False))
    runner = PolicyRunner.load(Path(args.checkpoint), config.sim_config(), config.settings)
    if args.execution == "ensemble":
        set_ensembling(runner.runtime, args.m, args.horizon_ticks, args.after_change, args.window_s)
    env = config.make_env()
    try:
        records = [run_one(runner, env, episode_spec(i, args.seed, parse_blocks("2-5")))
                   for i in range(args.episodes)]
    finally:
        env.close()
    setting = {"ensemble_m": args.m, "seed": args.seed, "world": args.world or "none",
               "execution": args.execution, "horizon_ticks": args.horizon_ticks, "task": args.task,
               "change_goal": args.change_goal, "after_change": args.after_change, "window_s": args.window_s}
    summary = summarize(records, setting)
    print(f"{setting}: {summary['successes']}/{args.episodes}; "
          f"{describe_grasp_precision(summary['grasp_precision'])}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
