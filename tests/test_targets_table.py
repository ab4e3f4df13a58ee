"""benchmarks/targets_table.py: the table of run_targets.sh's results, the expert's column
taken from another run of the same episodes when this run skipped the expert."""
import json

import pytest

from tests.benchmark_scripts import load

targets_table = load("targets_table")


def _summary(successes: int, p50: float = 1.0, nothing: int = 0) -> dict:
    return {"successes": successes, "episodes": 200,
            "grasp_precision": {"xy_cm_p50": p50, "xy_cm_p90": 2 * p50, "closed_on_nothing": nothing}}


def _robustness(path, who: dict, seed: int = 400000) -> None:
    path.mkdir(exist_ok=True)
    table = {"seed": seed, "episodes": 200, "blocks": "2-5", "camera_rate": 10.0, "rows": [],
             "summaries": {variant: dict(entry) for variant, entry in who.items()}}
    (path / "robustness.json").write_text(json.dumps(table))


@pytest.mark.unit
def test_the_expert_column_comes_from_the_other_run_of_the_same_episodes(tmp_path):
    run, before = tmp_path / "run", tmp_path / "before"
    _robustness(run, {"none": {"policy": _summary(197)}, "push": {"policy": _summary(183, 4.7, 176)}})
    _robustness(before, {"none": {"policy": _summary(199), "expert": _summary(200)},
                         "push": {"policy": _summary(169), "expert": _summary(195)}})
    (run / "policy_2-5.json").write_text(json.dumps(_summary(199, 1.22, 2)))
    assert targets_table.main([str(run), "--expert-from", str(before)]) == 0
    text = (run / "targets.md").read_text()
    assert "| world: push | 183/200 | 4.70 / 9.40 cm, 176 on nothing | - | 195/200 |" in text
    assert "| world: none | 197/200 | 1.00 / 2.00 cm, 0 on nothing | - | 200/200 |" in text
    assert "| 2-5 blocks | 199/200 | 1.22 / 2.44 cm, 2 on nothing | - | - |" in text
    assert f"{before}/robustness.json's, on the same episodes" in text
    # Without it the column stays empty: nothing is borrowed unasked.
    assert targets_table.main([str(run)]) == 0
    assert "| world: push | 183/200 | 4.70 / 9.40 cm, 176 on nothing | - | - |" in (run / "targets.md").read_text()


@pytest.mark.unit
def test_an_expert_run_of_other_episodes_is_refused(tmp_path, capsys):
    run, other = tmp_path / "run", tmp_path / "other"
    _robustness(run, {"none": {"policy": _summary(197)}})
    _robustness(other, {"none": {"policy": _summary(199), "expert": _summary(200)}}, seed=500000)
    assert targets_table.main([str(run), "--expert-from", str(other)]) == 2
    assert "ran other episodes" in capsys.readouterr().err
    assert not (run / "targets.md").exists()
    assert targets_table.main([str(run), "--expert-from", str(tmp_path / "missing")]) == 2
    (tmp_path / "empty").mkdir()
    assert targets_table.main([str(run), "--expert-from", str(tmp_path / "empty")]) == 2
    assert "has no robustness.json" in capsys.readouterr().err
    (run / "policy_6.json").write_text('{"successes": ')
    assert targets_table.main([str(run)]) == 2
    assert "policy_6.json: not JSON" in capsys.readouterr().err
    assert targets_table.main([]) == 2


@pytest.mark.unit
def test_run_targets_keeps_every_finished_file_and_borrows_the_expert_column(tmp_path):
    """benchmarks/run_targets.sh on a directory where every evaluation is done runs none of
    them again (ARM_ACT is a command that fails), and EXPERT_FROM fills the expert's column."""
    import os
    import subprocess
    import sys

    from tests.benchmark_scripts import BENCHMARKS

    run, before = tmp_path / "run", tmp_path / "before"
    _robustness(run, {"push": {"policy": _summary(183, 4.7, 176)}})
    _robustness(before, {"push": {"policy": _summary(169), "expert": _summary(195)}})
    for name in ("policy_2-5", "policy_6", "camera_10", "camera_25", "camera_50"):
        (run / f"{name}.json").write_text(json.dumps(_summary(199)))
    env = {**os.environ, "ARM_ACT": "false", "PY": sys.executable, "EXPERT_FROM": str(before)}
    done = subprocess.run(["bash", str(BENCHMARKS / "run_targets.sh"), "unused-checkpoint", str(run)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("kept") == 6
    table = (run / "targets.md").read_text()
    assert "| world: push | 183/200 | 4.70 / 9.40 cm, 176 on nothing | - | 195/200 |" in table
