"""benchmarks/place_fit.py (where the named block ends against its reference) and the place
column it gives benchmarks/heads/table.py."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.benchmark_scripts import load

pytestmark = pytest.mark.unit


def _record(reference, named, lifted, success=False):
    offset = [named[0] - reference[0], named[1] - reference[1]]
    return {"family": "relation", "success": success, "lifted_named_block": lifted,
            "final_place": {"named_cm": [*named, 2.0], "reference_cm": [*reference, 2.0],
                            "offset_xy_cm": offset, "distance_xy_cm": float(np.hypot(*offset))}}


def _evaluation(path, seed, n_lifted, n_left):
    """n_lifted episodes whose block ends 8 cm left of its reference, n_left whose block stays
    at a start unrelated to the reference."""
    rng = np.random.default_rng(seed)
    results = []
    for i in range(n_lifted + n_left):
        reference = rng.uniform([25, -20], [55, 20]).tolist()
        if i < n_lifted:
            results.append(_record(reference, [reference[0], reference[1] + 8.0], True, success=True))
        else:
            results.append(_record(reference, rng.uniform([25, -20], [55, 20]).tolist(), False))
    path.write_text(json.dumps({"results": results}))
    return path


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), n_lifted=st.integers(3, 30), n_left=st.integers(0, 30))
def test_a_block_taken_to_its_reference_fits_a_slope_of_one_over_the_lifted(tmp_path_factory, seed, n_lifted, n_left):
    path = _evaluation(tmp_path_factory.mktemp("fit") / "eval.json", seed, n_lifted, n_left)
    fit = load("place_fit").fit
    lifted = fit(path, lifted_only=True)
    assert lifted["episodes"] == lifted["successes"] == n_lifted and lifted["lifted_only"]
    assert lifted["slope_x"] == pytest.approx(1.0, abs=1e-3) and lifted["slope_y"] == pytest.approx(1.0, abs=1e-3)
    assert lifted["distance_p50_cm"] == pytest.approx(8.0)
    every = fit(path)
    assert every["episodes"] == n_lifted + n_left and not every["lifted_only"]


def test_too_few_lifted_or_no_place_records_is_a_clear_error(tmp_path):
    fit = load("place_fit").fit
    with pytest.raises(ValueError, match="1 episode\\(s\\) lifted the named block"):
        fit(_evaluation(tmp_path / "one.json", 0, 1, 10), lifted_only=True)
    (tmp_path / "old.json").write_text(json.dumps({"results": [{"success": True}]}))
    with pytest.raises(ValueError, match="no records with final_place"):
        fit(tmp_path / "old.json")
    assert load("place_fit").main([str(tmp_path / "old.json"), "--lifted"]) == 1


def test_the_heads_table_gives_the_place_of_the_lifted_blocks(tmp_path):
    table = load("heads/table")
    final = {"val_l1": 0.25, "val_target_cm": 0.4, "val_grounding_cm": 2.0, "val_grounding_patch_acc": 0.9,
             "val_place_cm": 1.5}
    runs = {"heads4_seed0_place": True, "heads1_seed0_place_ft": True, "heads1_seed0": False}
    for run, evaluation in runs.items():
        (tmp_path / run).mkdir()
        (tmp_path / run / "metrics.json").write_text(
            json.dumps({"final": final, "parameters": 1000, "train_time_s": 60.0}))
        body = json.loads(_evaluation(tmp_path / run / "eval_relation.json", 1, 20, 5).read_text())
        if not evaluation:  # an evaluation from before the place records: no place column
            body["results"] = [{k: v for k, v in r.items() if k != "final_place"} for r in body["results"]]
        body.update(successes=20, episodes=25, lifted_named_block=20, grasp_precision={"xy_cm_p50": 1.0})
        (tmp_path / run / "eval_relation.json").write_text(json.dumps(body))
    rows = {r["variant"]: r for r in (table.run_row(tmp_path / run) for run in runs)}
    assert rows["place"]["relation"]["place_lifted"]["episodes"] == 20
    assert "place_lifted" not in rows[""]["relation"]
    (tmp_path / "heads1_seed1").mkdir()  # trained, not evaluated yet: a row without evaluations
    (tmp_path / "heads1_seed1" / "metrics.json").write_text(
        json.dumps({"final": final, "parameters": 1000, "train_time_s": 60.0}))
    assert "relation" not in table.run_row(tmp_path / "heads1_seed1")
    text = table.markdown(list(rows.values()))
    assert "slope 1.00 / 1.00" in text and "8.0 cm" in text and "queries conditioned, 1.50 cm" in text
    assert "| 1 | 0 | added to the trained network, queries conditioned, 1.50 cm |" in text
    table.plot(list(rows.values()), tmp_path / "heads.png")  # the figure docs/training.md shows
    assert (tmp_path / "heads.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
