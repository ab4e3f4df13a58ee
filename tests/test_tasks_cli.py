"""--task and --instruction on arm-act eval, collect and demo: a short run each, the records
and bags carrying the goal, and the clear errors for instructions that do not fit."""

from __future__ import annotations

import json

import pytest

from arm_act.bags import bag_info
from arm_act.cli import main as cli
from arm_act.sim.instructions import Goal, parse_goal

pytestmark = pytest.mark.unit


def _eval(capsys, *args) -> tuple[int, str, str]:
    code = cli.main(["eval", "--policy", "expert", "--seed", "0", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_eval_mix_records_the_goal_and_breaks_success_down_by_family(capsys):
    code, out, _ = _eval(capsys, "--task", "mix", "--episodes", "2", "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["task"] == "mix" and summary["successes"] == 2
    families = [r["family"] for r in summary["results"]]
    assert families == ["relation", "stack"]  # seeds 0 and 1 of the mix
    for record in summary["results"]:
        assert parse_goal(record["instruction"]) == Goal.from_dict(record["goal"])
    assert summary["by_family"] == {f: {"episodes": 1, "successes": 1, "success_rate": 1.0} for f in families}


def test_eval_box_output_has_no_task_fields(capsys):
    code, out, _ = _eval(capsys, "--episodes", "1", "--json")
    summary = json.loads(out)
    assert code == 0 and "task" not in summary and "by_family" not in summary
    assert "family" not in summary["results"][0] and "goal" not in summary["results"][0]


def test_eval_fixed_instruction_and_its_refusals(capsys):
    # Six blocks: every colour is on the table; seed 0's five (2-5) have no red block.
    code, out, err = _eval(capsys, "--episodes", "1", "--seed", "2", "--blocks", "6", "--json",
                           "--instruction", "put the red one on top of the purple one")
    assert code == 0, err
    record = json.loads(out)["results"][0]
    assert record["goal"] == {"family": "stack", "colour": "red", "reference": "purple"} and record["success"]
    code, _, err = _eval(capsys, "--episodes", "1", "--instruction", "put the red block in the box")
    assert code == 2 and "does not fit episode seed 0" in err and "no red block on the table" in err
    for text, reason in (("", "empty"), ("put the red block in the bin", "unknown word 'bin'"),
                         ("stack the red block on the red block", "named twice")):
        code, _, err = _eval(capsys, "--episodes", "1", "--instruction", text)
        assert code == 2 and reason in err and err.count("\n") == 1, err
    with pytest.raises(SystemExit) as exit_:  # argparse's choices
        _eval(capsys, "--episodes", "1", "--task", "tower")
    assert exit_.value.code == 2 and "invalid choice: 'tower'" in capsys.readouterr().err


def test_eval_drawn_phrasings_run_in_process_only_and_no_task_in_the_crowded_world(capsys):
    code, _, err = _eval(capsys, "--episodes", "1", "--task", "stack", "--phrasing", "held-out", "--over-ros")
    assert code == 2 and "runs in process" in err and err.count("\n") == 1, err
    for world in ("crowded", "all"):
        code, _, err = _eval(capsys, "--episodes", "1", "--task", "stack", "--robustness", world)
        assert code == 2 and "crowded" in err and err.count("\n") == 1, err


def test_collect_bags_carry_the_goal(tmp_path, capsys):
    out = tmp_path / "demos"
    code = cli.main(["collect", "--episodes", "1", "--seed", "1", "--task", "stack", "--out", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["successes"] == 1 and summary["episodes_detail"][0]["family"] == "stack"
    custom = bag_info(out / "episode_1").custom_data
    goal = Goal.from_dict(json.loads(custom["goal"]))
    assert goal.family == custom["family"] == "stack" and parse_goal(custom["instruction"]) == goal
    code = cli.main(["collect", "--episodes", "1", "--out", str(tmp_path / "x"), "--instruction", "put it there"])
    assert code == 2 and "unknown word 'there'" in capsys.readouterr().err


def test_demo_refuses_an_instruction_without_a_goal_before_starting_nodes(capsys):
    code = cli.main(["demo", "--expert", "--no-view", "--instruction", "stack the red block"])
    assert code == 2 and "two colours" in capsys.readouterr().err


def test_eval_change_goal_records_the_change_and_judges_the_new_goal(capsys):
    code, out, err = _eval(capsys, "--episodes", "1", "--seed", "1000", "--blocks", "3", "--json",
                           "--change-goal", "2.4:stack")
    assert code == 0, err
    summary = json.loads(out)
    (record,) = summary["results"]
    (change,) = record["goal_changes"]
    assert change["time"] == pytest.approx(2.4) and change["instruction"] == record["instruction"]
    assert record["family"] == "stack" and record["success"] and record["lifted_at_change"]
    assert summary["goal_change"]["reached_new_goal"] == summary["goal_change"]["reached_with_a_block_in_hand"] == 1
    for args, reason in ((["--change-goal", "stack"], "not AT_S:TO"),
                         (["--change-goal", "1:put it somewhere"], "unknown word"),
                         (["--change-goal", "1:box", "--over-ros"], "publish the new instruction")):
        code, _, err = _eval(capsys, "--episodes", "1", *args)
        assert code == 2 and reason in err and err.count("\n") == 1, err
