"""benchmarks/stall_watch.py: per-CPU wake-up lateness beside a live-loop run, and the match
of a bench run's late periods with the stalls around them."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.benchmark_scripts import load

stall_watch = load("stall_watch")

pytestmark = pytest.mark.unit


def _stalls(*per_cpu):
    return {"threshold_ms": 5.0, "cpus": [{"cpu": i, "fifo": True, "wakeups": 1000, "worst_ms": 50.0,
                                           "stalls": rows} for i, rows in enumerate(per_cpu)]}


def test_a_late_period_is_matched_with_the_stalls_that_overlap_it():
    bench = {"window_start_monotonic_s": 100.0, "late_periods": [
        {"at_s": 10.0, "received_ms": 60.0, "sent_ms": 59.0, "sim_ms": 40.0},   # 109.94 .. 110.0
        {"at_s": 20.0, "received_ms": 31.0, "sent_ms": 20.0, "sim_ms": 20.0},   # 119.969 .. 120.0
        {"at_s": 30.0, "received_ms": 35.0, "sent_ms": 35.0, "sim_ms": 40.0}]}  # 129.965 .. 130.0
    # Both CPUs stopped ~45 ms inside the first; only CPU 1 in the second; none in the third
    # (a stall of CPU 0 that ended before it began).
    stalls = _stalls([(109.99, 45.0), (129.9, 8.0)], [(109.991, 46.0), (119.99, 12.0)])
    lines = stall_watch.match(bench, stalls)
    assert lines[0].startswith("late period at 10.0 s")
    assert "every CPU stalled: CPU 0 45.0 ms, CPU 1 46.0 ms" in lines[0]
    assert "stalls: CPU 1 12.0 ms" in lines[1] and "every CPU" not in lines[1]
    assert lines[2].endswith("no stall on any CPU")
    assert lines[3] == "CPU 0: 2 wake-ups over 5.0 ms late of 1000, worst 50.0 ms (SCHED_FIFO)"
    with pytest.raises(SystemExit, match="window_start_monotonic_s"):
        stall_watch.match({"late_periods": []}, stalls)


def test_sim_nodes_late_publications_are_matched_over_the_wait_and_the_work_before_them():
    event = {"monotonic_s": 110.0, "episode": 2, "sim_s": 3.5, "late_ms": 12.0, "work_ms": 15.0,
             "wake_late_ms": 10.0, "steps": 1, "step_ms": 1.0, "step_cpu_ms": 1.0, "renders": 1,
             "render_ms": 13.0, "render_cpu_ms": 4.0}  # spans 109.975 .. 110.0
    bench = {"window_start_monotonic_s": 100.0, "late_periods": [],
             "ros_sim_loop": {"late": [event, {**event, "monotonic_s": 120.0}],
                              "late_over_10ms": [event]}}  # the same one: set beside the stalls once
    stalls = _stalls([(109.98, 9.0)], [(109.979, 8.0), (119.9, 20.0)])
    lines = stall_watch.match(bench, stalls)
    assert lines[0].startswith("sim_node late 12.0 ms at 10.000 s (tick, episode 2, 3.5 s in): woke 10.0 ms late")
    assert "1 render(s) 13.0 ms (4.0 CPU)" in lines[0] and "every CPU stalled: CPU 0 9.0 ms, CPU 1 8.0 ms" in lines[0]
    assert lines[1].endswith("no stall on any CPU")  # CPU 1's stall ended before 119.975
    assert lines[2].startswith("CPU 0:")
    bench["ros_policy_answers"] = {"late": [{"monotonic_s": 119.91, "stamp_s": 5.02, "since_previous_ms": 31.0,
                                             "clock_to_callback_ms": 12.0, "joint_after_clock_ms": 0.2,
                                             "act_ms": 0.9}]}
    lines = stall_watch.match(bench, stalls)
    assert lines[2] == ("policy_node answered the tick at 5.02 s 31.0 ms after its answer before, at 19.910 s: "
                        "/clock from sim_node's write to the callback 12.0 ms, the joint state 0.2 ms after the "
                        "/clock, its own work 0.9 ms; stalls: CPU 1 20.0 ms")


@given(st.lists(st.tuples(st.floats(0, 100, allow_nan=False), st.floats(0.1, 500, allow_nan=False)), max_size=20),
       st.floats(0, 100, allow_nan=False), st.floats(0, 1, allow_nan=False))
@settings(max_examples=200, deadline=None)
def test_overlapping_keeps_exactly_the_stalls_that_touch_the_span(rows, w0, length):
    w1 = w0 + length
    got = stall_watch.overlapping(_stalls(rows), w0, w1)
    expected = [(0, at - ms / 1e3, ms) for at, ms in rows if at - ms / 1e3 < w1 and at > w0]
    assert [(c, pytest.approx(s, abs=1e-3), m) for c, s, m in got] == expected


def test_it_watches_every_cpu_for_real():
    result = stall_watch.record(seconds=0.5, threshold_ms=5.0)
    assert [row["cpu"] for row in result["cpus"]] == sorted(os.sched_getaffinity(0))
    for row in result["cpus"]:
        assert row["wakeups"] > 50 and row["worst_ms"] >= 0.0
        assert all(ms > 5.0 for _, ms in row["stalls"])
