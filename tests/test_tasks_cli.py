"""--task and --instruction on arm-act eval, collect and demo: a short run each, the records
and bags carrying the goal, and the clear errors for instructions that do not fit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from arm_act.bags import bag_info
from arm_act.cli import main as cli
from arm_act.eval.evaluate import final_place
from arm_act.sim.instructions import Goal, parse_goal
from arm_act.sim.task import ObjectState

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
    # Where each episode left the named block against its reference (the success rules'
    # geometry: stacked within 2 cm, one block higher; beside at 4-12 cm, both on the table).
    relation, stack = (r["final_place"] for r in summary["results"])
    assert 4.0 <= relation["distance_xy_cm"] <= 12.0 and abs(relation["named_cm"][2] - relation["reference_cm"][2]) < 1
    assert stack["distance_xy_cm"] <= 2.0 and 3.0 <= stack["named_cm"][2] - stack["reference_cm"][2] <= 5.0
    for place in (relation, stack):
        dx, dy = place["offset_xy_cm"]
        assert place["distance_xy_cm"] == pytest.approx((dx * dx + dy * dy) ** 0.5, abs=0.02)
    assert summary["by_family"] == {f: {"episodes": 1, "successes": 1, "success_rate": 1.0} for f in families}


def test_eval_box_output_has_no_task_fields(capsys):
    code, out, _ = _eval(capsys, "--episodes", "1", "--json")
    summary = json.loads(out)
    assert code == 0 and "task" not in summary and "by_family" not in summary
    assert not {"family", "goal", "final_place"} & set(summary["results"][0])


def test_final_place_measures_from_the_box_or_the_reference_and_is_none_without_them():
    def obj(kind, colour, xyz):
        return ObjectState(kind, kind, colour, np.ones(4), np.array(xyz), np.array([0, 0, 0, 1.0]), np.ones(3))

    objects = [obj("block", "red", [0.50, 0.10, 0.02]), obj("block", "blue", [0.47, 0.06, 0.02]),
               obj("box", "brown", [0.40, -0.30, 0.0])]
    box = final_place(objects, Goal("box", "red"))
    assert box == {"named_cm": [50.0, 10.0, 2.0], "reference_cm": [40.0, -30.0, 0.0],
                   "offset_xy_cm": [10.0, 40.0], "distance_xy_cm": 41.23}
    beside = final_place(objects, Goal("relation", "red", "blue", "behind"))
    assert beside["offset_xy_cm"] == [3.0, 4.0] and beside["distance_xy_cm"] == 5.0
    assert final_place(objects, Goal("stack", "red", "green")) is None  # no green block
    assert final_place(objects[1:], Goal("box", "red")) is None  # the named block is gone


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


def test_collect_change_goal_bags_every_instruction_and_trains_from_the_change(tmp_path, capsys):
    """`collect --change-goal`: the expert re-plans; the bag carries both instructions on
    `task` and the change in `episode`; training reads it from the change on, under the new
    instruction, with the new block as the target."""
    from arm_act.bags.reader import read_bag
    from arm_act.data.dataset import extract_episode

    out = tmp_path / "demos"
    code = cli.main(["collect", "--episodes", "1", "--seed", "1000", "--blocks", "3", "--change-goal", "1.0:box",
                     "--out", str(out), "--json"])
    assert code == 0
    (record,) = json.loads(capsys.readouterr().out)["episodes_detail"]
    (change,) = record["goal_changes"]
    assert record["success"] and change["time"] == pytest.approx(1.0)
    bag = out / "episode_1000"
    custom = bag_info(bag).custom_data
    assert json.loads(custom["goal_changes"]) == [change] and custom["instruction"] == change["instruction"]
    tasks = [(stamp, msg.data) for _, stamp, msg in read_bag(bag, ["/task"])]
    assert len(tasks) == 2 and tasks[1][1] == change["instruction"] != tasks[0][1]
    assert (tasks[1][0] - tasks[0][0]) * 1e-9 == pytest.approx(1.0)
    episodes = [json.loads(msg.data) for _, _, msg in read_bag(bag, ["/episode"])]
    assert "goal_changes" not in episodes[0] and episodes[-1]["goal_changes"] == [change]
    episode = extract_episode(bag)
    assert episode.instruction == change["instruction"] and episode.success
    assert episode.frame_ticks[0] == 50 and len(episode.frame_ticks) == record["frames"] - 10  # 10 Hz frames
    colour = parse_goal(change["instruction"]).colour
    objects = [(stamp, msg) for _, stamp, msg in read_bag(bag, ["/objects"])]
    first = next(m for s, m in objects if s >= tasks[1][0])
    start = next(np.array([m.pose.position.x, m.pose.position.y]) for m in first.markers
                 if m.ns == "block" and m.text.endswith(f"|{colour}"))
    np.testing.assert_allclose(episode.frame_target[0, :2], start, atol=1e-3)
    code = cli.main(["collect", "--episodes", "1", "--out", str(tmp_path / "x"), "--change-goal", "soon:box"])
    assert code == 2 and "not a time in seconds" in capsys.readouterr().err


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
