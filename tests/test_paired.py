"""benchmarks/paired.py and arm_act.eval.stats.sign_test_p: two checkpoints compared seed by
seed on the same episodes."""
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arm_act.eval.stats import sign_test_p
from tests.benchmark_scripts import load

paired = load("paired")


@pytest.mark.unit
def test_sign_test_matches_exact_binomial_values():
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(0, 5) == pytest.approx(2 / 32)
    assert sign_test_p(3, 3) == 1.0
    assert sign_test_p(50, 82) == pytest.approx(0.0067, abs=5e-5)


@pytest.mark.unit
@given(st.integers(0, 300), st.integers(0, 300))
def test_sign_test_is_a_probability_symmetric_in_its_arguments(wins, losses):
    p = sign_test_p(wins, losses)
    assert 0.0 < p <= 1.0 and p == sign_test_p(losses, wins)
    assert sign_test_p(min(wins, losses), max(wins, losses) + 1) <= p  # more lopsided, never likelier


def _eval_file(path, outcomes: dict[int, bool], world: str | None = None) -> None:
    summary = {"results": [{"seed": s, "success": ok} for s, ok in outcomes.items()]}
    data = {"summaries": {world: {"policy": summary}}} if world else summary
    path.write_text(json.dumps(data))


@pytest.mark.unit
def test_paired_pools_seed_by_seed_wins_over_pairs_of_files(tmp_path, capsys):
    a1, b1, a2, b2 = (tmp_path / f"{n}.json" for n in ("a1", "b1", "a2", "b2"))
    _eval_file(a1, {1: True, 2: True, 3: False, 4: False})
    _eval_file(b1, {1: True, 2: False, 3: True, 4: True})
    _eval_file(a2, {9: False, 10: True}, world="push")
    _eval_file(b2, {9: True, 10: True}, world="push")
    result = paired.compare([(a1, b1), (a2, b2)])
    assert (result["a_successes"], result["b_successes"], result["a_only"], result["b_only"]) == (3, 5, 1, 3)
    assert result["sign_test_p"] == pytest.approx(sign_test_p(1, 3))
    assert paired.main([str(a1), str(b1), str(a2), str(b2)]) == 0
    assert "only A 1, only B 3" in capsys.readouterr().out


@pytest.mark.unit
def test_paired_refuses_what_it_cannot_compare(tmp_path, capsys):
    a, b, other, worlds, broken = (tmp_path / f"{n}.json" for n in ("a", "b", "other", "worlds", "broken"))
    _eval_file(a, {1: True, 2: False})
    _eval_file(b, {1: True, 2: True})
    _eval_file(other, {1: True, 3: True})
    worlds.write_text(json.dumps({"summaries": {"push": {"policy": {"results": []}},
                                                "size": {"policy": {"results": []}}}}))
    broken.write_text('{"results": [')
    assert paired.main([str(a)]) == 2
    assert paired.main([str(a), str(other)]) == 2
    assert "ran different seeds" in capsys.readouterr().err
    assert paired.main([str(worlds), str(b)]) == 2
    assert "2 worlds" in capsys.readouterr().err
    assert paired.main([str(broken), str(b)]) == 2
    assert "broken.json: not JSON" in capsys.readouterr().err
    assert paired.main([str(tmp_path / "missing.json"), str(b)]) == 2
