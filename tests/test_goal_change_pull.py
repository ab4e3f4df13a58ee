"""benchmarks/goal_change_pull.py: where a first grasp after a goal change lies on the line
from the new block to the old one, on records built from the sim's own layouts."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arm_act.sim import ArmEnv

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "goal_change_pull.py"


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
