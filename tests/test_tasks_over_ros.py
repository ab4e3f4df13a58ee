"""The task families through the nodes: `arm-act eval --task mix --over-ros` (sim_node and
expert_node over DDS, in lockstep) gives the in-process episodes, goals included."""

from __future__ import annotations

import json

import pytest

from arm_act.cli import main as cli
from arm_act.sim.instructions import Goal, parse_goal

pytestmark = pytest.mark.ros


def test_mix_over_ros_gives_the_in_process_episodes_and_goals(capsys):
    runs = {}
    for mode in ("in-process", "over-ros"):
        args = ["eval", "--policy", "expert", "--task", "mix", "--episodes", "2", "--seed", "0", "--json"]
        assert cli.main(args + (["--over-ros"] if mode == "over-ros" else [])) == 0
        runs[mode] = json.loads(capsys.readouterr().out)
    keys = ("seed", "instruction", "status", "duration", "family", "goal")
    ours, theirs = ([{k: r[k] for k in keys} for r in runs[m]["results"]] for m in ("over-ros", "in-process"))
    assert ours == theirs
    assert [r["family"] for r in ours] == ["relation", "stack"] and all(r["status"] == "success" for r in ours)
    for record in ours:
        assert parse_goal(record["instruction"]) == Goal.from_dict(record["goal"])
    assert runs["over-ros"]["by_family"] == runs["in-process"]["by_family"]
