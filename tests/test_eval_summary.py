"""The evaluation summary over several episodes, where its figures are not fixed by the
arithmetic of one episode: the Wilson interval against published values, the lifted-block
counts, the per-block-count rates and the median grounding error."""
import pytest

from arm_act.eval.evaluate import summarize, wilson_interval

pytestmark = pytest.mark.unit


def _result(success: bool, n_blocks: int, status: str, lifted: bool, other: bool, first_cm: float) -> dict:
    return {"success": success, "n_blocks": n_blocks, "status": status, "lifted_named_block": lifted,
            "lifted_other_block": other, "target_error": {"first_cm": first_cm, "median_cm": first_cm}}


@pytest.mark.parametrize("successes,n,low,high", [
    (0, 1, 0.0, 0.7935), (1, 1, 0.2065, 1.0),  # one episode: never more certain than this
    (2, 3, 0.2077, 0.9385), (7, 10, 0.3968, 0.8922), (0, 20, 0.0, 0.1611),
])
def test_wilson_interval_matches_published_values(successes, n, low, high):
    # 95% Wilson score intervals (z = 1.96): the roots p of (k/n - p)^2 = z^2 p (1 - p) / n,
    # solved as a quadratic outside the code under test (0/20 -> 0.1611 is in Newcombe 1998).
    assert wilson_interval(successes, n) == (pytest.approx(low, abs=1e-4), pytest.approx(high, abs=1e-4))


def test_summary_of_several_episodes():
    results = [
        _result(True, 2, "success", True, False, 5.0),
        _result(False, 3, "timeout", True, True, 1.0),
        _result(True, 3, "success", True, False, 3.0),
    ]
    summary = summarize(results, {"seed": 7})
    assert summary["seed"] == 7 and summary["results"] is results
    assert (summary["episodes"], summary["successes"]) == (3, 2)
    assert summary["success_rate"] == pytest.approx(2 / 3)
    assert summary["ci95"] == [0.2077, 0.9385]
    assert summary["by_blocks"] == {"2": {"episodes": 1, "success_rate": 1.0},
                                    "3": {"episodes": 2, "success_rate": 0.5}}
    assert summary["statuses"] == {"success": 2, "failure": 0, "timeout": 1}
    assert (summary["lifted_named_block"], summary["lifted_other_block"]) == (3, 1)
    assert summary["target_error_first_cm_median"] == 3.0  # not the first episode's 5.0


def test_summary_of_the_expert_has_no_policy_figures():
    results = [{"success": True, "n_blocks": 2, "status": "success"}]
    summary = summarize(results, {})
    assert "lifted_named_block" not in summary and "target_error_first_cm_median" not in summary
    assert summary["ci95"] == [0.2065, 1.0]


def _grasp(success: bool, grasps: int, held: bool, xy: float | None) -> dict:
    return {"success": success, "n_blocks": 2, "status": "success" if success else "timeout", "grasps": grasps,
            "first_grasp_missed": grasps >= 1 and not held, "first_grasp_held": held, "first_grasp_xy_cm": xy}


def test_grasp_precision_reports_percentiles_a_histogram_and_the_misses():
    from arm_act.eval.evaluate import GRASP_ERROR_BINS_CM, describe_grasp_precision

    results = [_grasp(True, 1, True, v) for v in (0.2, 0.4, 0.6, 0.8, 1.2)]
    results += [_grasp(False, 2, False, 3.5), _grasp(False, 0, False, None)]  # a miss; one never closed
    g = summarize(results, {})["grasp_precision"]
    assert (g["closed"], g["held"], g["closed_on_nothing"]) == (6, 5, 1)
    assert g["xy_cm_p50"] == 0.7 and g["xy_cm_max"] == 3.5
    assert g["xy_cm_p90"] == pytest.approx(2.35)  # linear interpolation between 1.2 and 3.5
    assert g["histogram"]["edges_cm"] == list(GRASP_ERROR_BINS_CM)
    assert g["histogram"]["counts"] == [2, 2, 1, 0, 0, 1, 0, 0] and sum(g["histogram"]["counts"]) == 6
    assert describe_grasp_precision(g) == ("first grasp 0.70 cm p50, 2.35 cm p90 from the block's centre "
                                           "(n=6), 1 closed on nothing")


def test_grasp_precision_without_any_grasp():
    from arm_act.eval.evaluate import describe_grasp_precision

    g = summarize([_grasp(False, 0, False, None)], {})["grasp_precision"]
    assert g["xy_cm_p50"] is None and g["histogram"]["counts"] == [0] * 8
    assert describe_grasp_precision(g) == "no grasp closed"
