"""Where do the retries go after the push? Reruns push-world episodes of an `arm-act eval
--robustness push` result (its failures and as many episodes that recovered from a missed
first grasp) with the network alone, and measures, after the push, at every camera pair:

    target error   the target head's estimate minus the named block, horizontally (cm)
    to the hand    the cosine between that error and the direction from the block to the
                   grasp point: near 1, the estimate is drawn toward the hand
    to the old     the estimate's pull toward where the block was before the push
                   (eval.in_process.pull_toward: 0 at the block, 1 at the old place)

and at every grasp after the first, the grasp point's offset from the block, its pull
toward the old place and the cosine of the offset with the block-to-old direction.

    python benchmarks/push_retries.py EVAL.json --checkpoint checkpoints/default [--json OUT]

The episodes are the record's seeds and block counts, rerun with the settings the result
file names (latency, gripper command), so they repeat the recorded outcomes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


class _Probe:
    """on_tick callback: the push's old place, the target estimate after the push and the
    grasp points, for one episode."""

    def __init__(self, env, agent, old_xy: np.ndarray) -> None:
        self.env, self.agent, self.old = env, agent, old_xy
        self.estimates: list[dict] = []
        self.grasps: list[dict] = []
        self._closed = False
        self._pairs = 0

    def on_tick(self, obs, cmd) -> None:
        from arm_act.eval.in_process import CLOSED_COMMAND, named_block_position, pull_toward

        block = named_block_position(obs.objects, obs.instruction)
        if block is None or np.linalg.norm(block[:2] - self.old) < 0.01:  # not pushed yet
            self._closed = cmd.gripper < CLOSED_COMMAND
            self._pairs = self.agent.chunks
            return
        hand = self.env.grasp_point()[:2]
        if self.agent.chunks != self._pairs and self.agent.selector.last_prediction.target is not None:
            self._pairs = self.agent.chunks
            error = self.agent.selector.last_prediction.target[:2] - block[:2]
            self.estimates.append({"error_cm": 100 * float(np.linalg.norm(error)),
                                   "to_hand": _cosine(error, hand - block[:2]),
                                   "to_old": pull_toward(self.agent.selector.last_prediction.target, block, self.old)})
        closed = cmd.gripper < CLOSED_COMMAND
        if closed and not self._closed:
            offset = hand - block[:2]
            self.grasps.append({"xy_cm": round(100 * float(np.linalg.norm(offset)), 2),
                                "to_old": round(pull_toward(hand, block, self.old), 3),
                                "cosine_old": round(_cosine(offset, self.old - block[:2]), 3)})
        self._closed = closed


def _median(rows: list[dict], key: str) -> float | None:
    return round(float(np.median([r[key] for r in rows])), 3) if rows else None


def probe(path: Path, checkpoint: Path) -> dict:
    """Rerun the failures and the recoveries of one push-world result file."""
    from arm_act.eval.config import EvalConfig
    from arm_act.eval.in_process import PolicyAgent, PolicyRunner, PolicySettings
    from arm_act.sim.rollout import run_episode

    body = json.loads(Path(path).read_text())
    summary = (body.get("summaries") or {}).get("push", {}).get("policy")
    if summary is None:
        raise ValueError(f"{path}: no push-world policy results (arm-act eval --robustness push --no-expert --out)")
    described = summary["policy"]
    failed = [r for r in summary["results"] if not r["success"]]
    recovered = [r for r in summary["results"] if r["success"] and r.get("first_grasp_missed")][:len(failed)]
    config = EvalConfig(policy=str(checkpoint), robustness="push", camera_rate=summary["camera_rate"])
    settings = PolicySettings(latency_ticks=described["latency_ticks"], gripper=described["gripper"], threads=1)
    runner = PolicyRunner.load(checkpoint, config.sim_config(), settings)
    env = config.make_env()
    rows = []
    try:
        for record, group in [(r, "failed") for r in failed] + [(r, "recovered") for r in recovered]:
            old = np.asarray(record["perturbation"]["push_from"], float)
            agent = PolicyAgent(runner.runtime, runner.latency_ticks, control_rate=config.control_rate)
            probe_ = _Probe(env, agent, old)
            result = run_episode(env, agent, record["seed"], record["n_blocks"], on_tick=probe_.on_tick)
            est = probe_.estimates
            rows.append({"seed": record["seed"], "group": group, "success": bool(result.success),
                         "as_recorded": bool(result.success) == bool(record["success"]),
                         "estimate_error_cm_p50": _median(est, "error_cm"),
                         "estimate_to_hand_p50": _median(est, "to_hand"),
                         "estimate_to_old_p50": _median(est, "to_old"),
                         "retries": probe_.grasps[1:] if probe_.grasps else []})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        env.close()
    groups = {}
    for group in ("failed", "recovered"):
        mine = [r for r in rows if r["group"] == group]
        retries = [g for r in mine for g in r["retries"]]
        groups[group] = {"episodes": len(mine),
                         "estimate_error_cm_p50": _median([r for r in mine if r["estimate_error_cm_p50"] is not None],
                                                          "estimate_error_cm_p50"),
                         "estimate_to_hand_p50": _median([r for r in mine if r["estimate_to_hand_p50"] is not None],
                                                         "estimate_to_hand_p50"),
                         "estimate_to_old_p50": _median([r for r in mine if r["estimate_to_old_p50"] is not None],
                                                        "estimate_to_old_p50"),
                         "retries": len(retries), "retry_xy_cm_p50": _median(retries, "xy_cm"),
                         "retry_to_old_p50": _median(retries, "to_old"),
                         "retry_cosine_old_p50": _median(retries, "cosine_old")}
    return {"file": str(path), "checkpoint": str(checkpoint), "groups": groups, "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("eval_json", type=Path)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--json", type=Path, help="write the result here")
    args = parser.parse_args(argv)
    try:
        result = probe(args.eval_json, args.checkpoint)
    except (OSError, ValueError, KeyError) as exc:
        print(f"push_retries: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result["groups"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
