"""benchmarks/goal_change_pull.py: where a first grasp after a goal change lies on the line
from the new block to the old one, on records built from the sim's own layouts; and the same
measure of the target head's estimate, recorded by `arm-act eval --change-goal`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arm_act.cli import main as cli
from arm_act.eval.in_process import pull_toward
from arm_act.sim import ArmEnv

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "goal_change_pull.py"


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_the_pull_is_the_fraction_of_the_way_to_the_old_block(tmp_path):
    records = []
    with ArmEnv() as env:
        for seed, (along, across) in zip((1000, 1001, 1002), ((0.25, 0.0), (0.0, 0.1), (-0.5, 0.0)), strict=True):
            env.reset(seed=seed, n_blocks=3)
            where = {o.colour: np.array(o.position[:2]) for o in env.objects() if o.kind == "block"}
            old = env.goal.colour
            new = next(c for c in sorted(where) if c != old)
            towards = 100 * (where[old] - where[new])
            offset = along * towards + across * np.array([-towards[1], towards[0]])
            words = f"put the {new} block in the box"
            records.append({"seed": seed, "n_blocks": 3, "success": False, "instruction": words,
                            "goal_changes": [{"time": 0.5, "instruction": words}],
                            "first_grasp_offset_cm": [*offset.tolist(), 0.0]})
    (tmp_path / "eval.json").write_text(json.dumps({"results": records}))
    result = _run(tmp_path / "eval.json", "--json", tmp_path / "out.json")
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "out.json").read_text())["rows"]
    assert [r["pull"] for r in rows] == pytest.approx([0.25, 0.0, -0.5], abs=1e-3)
    assert [r["cosine"] for r in rows] == pytest.approx([1.0, 0.0, -1.0], abs=1e-3)
    assert "pull towards the old one 0.0 (p50" in result.stdout
    (tmp_path / "plain.json").write_text(json.dumps({"results": [{"seed": 1, "n_blocks": 2, "success": True}]}))
    result = _run(tmp_path / "plain.json")
    assert result.returncode == 2 and "no records with a goal change" in result.stderr


coordinate = st.floats(-1.0, 1.0, allow_nan=False)


@given(st.tuples(coordinate, coordinate), st.tuples(coordinate, coordinate), st.floats(-2, 2), st.floats(-2, 2),
       st.floats(-1, 1))
def test_pull_toward_is_the_share_of_the_way_along_the_line(new, old, along, across, height):
    new, old = np.array([*new, 0.02]), np.array([*old, 0.02])
    line = old[:2] - new[:2]
    if line @ line < 1e-6:
        assert pull_toward(new, new, new) == 0.0  # one block: no line to lean along
        return
    point = new[:2] + along * line + across * np.array([-line[1], line[0]])
    assert pull_toward(np.array([*point, height]), new, old) == pytest.approx(along, abs=1e-6)


def test_eval_records_where_the_target_head_puts_the_new_goal(capsys):
    code = cli.main(["eval", "--policy", str(ROOT / "checkpoints" / "default"), "--episodes", "1", "--seed", "1000",
                     "--blocks", "3", "--change-goal", "0.3:box", "--time-limit", "1.5", "--latency-ticks", "1",
                     "--threads", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    (record,) = summary["results"]
    after = record["target_error"]["after_change"]  # the pairs at 0.4 s and later, under the new goal
    assert set(after) == {"first_cm", "median_cm", "pull_first", "pull_median"}
    assert 0 <= after["first_cm"] < 100 and -5 < after["pull_first"] < 5
    assert summary["target_after_change"] == pytest.approx(after)
    assert record["target_error"]["first_cm"] != after["first_cm"]  # the first pair is the old goal's
