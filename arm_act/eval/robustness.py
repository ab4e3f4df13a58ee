"""The robustness suite of `arm-act eval --robustness NAME|all`: success under changes of
the world that training never saw (arm_act/sim/perturb.py), a checkpoint beside the
scripted expert under the same change, on the same seeds.

    table = robustness_suite(EvalConfig(policy="checkpoints/default", episodes=50, seed=400000),
                             ["none", *ROBUSTNESS])
    print(markdown_table(table))

Every variant runs the same episode seeds, so "none" (the plain world) and each
perturbation see the same layouts; the perturbation's values are drawn from each episode's
seed (sim.perturb.world_perturbation_rng) and recorded in every episode's record.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from arm_act.eval.evaluate import EXPERT, EvalConfig, evaluate

PLAIN = "none"


def variants(name: str) -> list[str]:
    """"all" -> the plain world then every perturbation; a perturbation's name -> [it]."""
    from arm_act.sim.perturb import ROBUSTNESS

    if name == "all":
        return [PLAIN, *ROBUSTNESS]
    if name != PLAIN and name not in ROBUSTNESS:
        raise ValueError(f"robustness={name!r} must be 'all', {PLAIN!r} or one of {list(ROBUSTNESS)}")
    return [name]


def _cell(summary: dict) -> dict:
    cell = {k: summary[k] for k in ("episodes", "successes", "success_rate", "ci95", "statuses", "wall_time_s")}
    for key in ("regrasp", "pushed", "lifted_named_block"):
        if key in summary:
            cell[key] = summary[key]
    return cell


def robustness_suite(config: EvalConfig, names: list[str], with_expert: bool = True,
                     on_variant: Callable[[dict], None] | None = None,
                     on_record: Callable[[str, str, dict], None] | None = None) -> dict:
    """Evaluate config's policy (and, for a checkpoint with with_expert, the expert too) in
    each named variant. on_variant(table so far) after each variant; on_record(variant,
    "policy"|"expert", record) after each episode. Returns {"rows": [{variant,
    policy: cell, expert: cell}], "summaries": {variant: {who: full summary}}, ...}."""
    agents = {"policy": config.policy} if config.policy != EXPERT else {}
    if with_expert or config.policy == EXPERT:
        agents["expert"] = EXPERT
    table: dict = {"seed": config.seed, "episodes": config.episodes, "blocks": config.blocks,
                   "camera_rate": config.camera_rate, "policy": str(config.policy), "rows": [], "summaries": {}}
    for name in names:
        row: dict = {"variant": name}
        table["summaries"][name] = {}
        for who, policy in agents.items():
            summary = evaluate(dataclasses.replace(config, policy=policy, robustness=None if name == PLAIN else name),
                               on_record=None if on_record is None else
                               lambda record, n=name, w=who: on_record(n, w, record))
            row[who] = _cell(summary)
            table["summaries"][name][who] = summary
        table["rows"].append(row)
        if on_variant is not None:
            on_variant(table)
    return table


def _rate(cell: dict | None) -> str:
    if cell is None:
        return "-"
    low, high = cell["ci95"]
    return f"{cell['successes']}/{cell['episodes']} = {cell['success_rate']:.1%} ({low:.1%}-{high:.1%})"


def markdown_table(table: dict) -> str:
    """The table: one row per variant, success (95% Wilson CI) of the policy and the expert,
    and the policy's missed first grasps (re-grasp successes)."""
    lines = [f"Robustness: {table['episodes']} episodes per variant from seed {table['seed']}, "
             f"{table['blocks']} blocks, camera {table['camera_rate']} Hz; policy {table['policy']}", "",
             "| variant | policy success (95% CI) | expert success (95% CI) | policy: missed first grasps "
             "(then succeeded) |",
             "|---|---|---|---|"]
    for row in table["rows"]:
        regrasp = (row.get("policy") or {}).get("regrasp")
        missed = "-" if regrasp is None else (f"{regrasp['missed_first_grasp']} "
                                              f"({regrasp['succeeded_after_miss']})")
        lines.append(f"| {row['variant']} | {_rate(row.get('policy'))} | {_rate(row.get('expert'))} | {missed} |")
    return "\n".join(lines)


def compact(table: dict) -> dict:
    """The table without the per-episode records (for printing as JSON)."""
    return {k: v for k, v in table.items() if k != "summaries"}
