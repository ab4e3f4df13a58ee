"""benchmarks/phrasing_order.py: a family evaluation's episodes grouped by word order (the block
to move named before or after its place) and by template."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arm_act.sim.instructions import COLOURS, Goal, instructions_for
from tests.benchmark_scripts import BENCHMARKS, load

pytestmark = pytest.mark.unit

SCRIPT = BENCHMARKS / "phrasing_order.py"


def _script():
    return load("phrasing_order")


goals = st.one_of(
    st.builds(lambda c: Goal("box", c), st.sampled_from(COLOURS)),
    st.builds(lambda cr: Goal("stack", *cr), st.permutations(COLOURS).map(lambda p: tuple(p[:2]))),
    st.builds(lambda cr, rel: Goal("relation", *cr, rel), st.permutations(COLOURS).map(lambda p: tuple(p[:2])),
              st.sampled_from(("left", "right", "front", "behind"))))


@given(goals)
def test_a_template_gives_back_its_sentence_and_each_sentence_has_an_order(goal):
    script = _script()
    for held_out in (False, True):
        for sentence in instructions_for(goal, held_out):
            template = script.template_of(sentence, goal.to_dict())
            assert template.format(c=goal.colour, r=goal.reference or "") == sentence
            assert "{c}" in template and ("{r}" in template) == (goal.family != "box")
            assert script.order_of(sentence, goal.to_dict()) in ("block first", "place first")


@pytest.mark.parametrize("goal", [Goal("box", "red"), Goal("stack", "red", "blue"),
                                  Goal("relation", "red", "blue", "left")])
def test_each_held_out_set_has_sentences_in_both_orders(goal):
    orders = {_script().order_of(s, goal.to_dict()) for s in instructions_for(goal, held_out=True)}
    assert orders == {"block first", "place first"}


def test_breakdown_counts_each_group(tmp_path):
    def record(instruction, goal, success, missed, other, target):
        return {"instruction": instruction, "goal": goal, "success": success, "first_grasp_missed": missed,
                "lifted_other_block": other, "target_error": {"first_cm": target}}

    stack = {"family": "stack", "colour": "red", "reference": "blue"}
    body = {"results": [record("stack the red block on the blue block", stack, True, False, False, 1.0),
                        record("put the red block on the blue block", stack, False, False, False, 3.0),
                        record("on the blue block stack the red one", stack, False, True, True, 18.0)]}
    path = tmp_path / "stack.json"
    path.write_text(json.dumps(body))
    out = tmp_path / "out.json"
    run = subprocess.run([sys.executable, str(SCRIPT), str(path), "--json", str(out)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    res = json.loads(out.read_text())[0]
    assert res["by_order"]["block first"] == {"episodes": 2, "successes": 1, "first_grasp_on_nothing": 0,
                                              "lifted_other_block": 0, "target_first_cm_p50": 2.0}
    assert res["by_order"]["place first"]["lifted_other_block"] == 1
    assert res["by_template"]["on the {r} block stack the {c} one"]["episodes"] == 1
    assert "place first" in run.stdout


def test_a_file_without_family_records_is_a_clear_error(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"results": [{"success": True}]}))
    run = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "no records with an instruction" in run.stderr
