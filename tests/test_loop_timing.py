"""sim_node's loop timing (arm_act.nodes.loop_timing): what a late publication is set beside."""
from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arm_act.nodes.loop_timing import AnswerTiming, LoopTiming

pytestmark = pytest.mark.unit


def _spin(seconds: float) -> None:
    """Busy for `seconds` of this thread's CPU time (however loaded the machine is)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_late_publication_carries_the_work_and_the_wake_up_before_it():
    timing = LoopTiming(event_ms=5.0)
    timing.woke(100.0, deadline=99.993)  # the wait woke 7 ms after its deadline
    timing.timed("step", lambda: _spin(0.004))
    timing.timed("render", lambda: time.sleep(0.006))  # wall, not CPU: the thread was not running
    timing.late(100.020, 8.0, episode=3, sim_s=1.25, what="control tick", tick_sent_at=100.005, answered_at=100.0)
    (event,) = timing.events
    assert event["what"] == "control tick" and event["episode"] == 3 and event["sim_s"] == 1.25
    assert event["late_ms"] == 8.0
    assert event["work_ms"] == 20.0 and event["wake_late_ms"] == 7.0
    assert event["since_tick_ms"] == 15.0 and event["answer_ms"] is None  # the tick's command had not come
    assert event["steps"] == 1 and event["step_ms"] >= 4.0 and event["step_cpu_ms"] >= 4.0
    assert event["renders"] == 1 and event["render_ms"] >= 6.0 and event["render_cpu_ms"] < 3.0
    values = timing.values()
    assert json.loads(values["loop_late_latest"]) == [event]
    assert values["loop_late_events"] == "1" and values["loop_late_over_10ms"] == "0"
    assert float(values["loop_wake_late_max_ms"]) == 7.0 and float(values["step_max_ms"]) >= 4.0
    assert float(values["step_cpu_max_ms"]) >= 4.0 and float(values["render_cpu_max_ms"]) < 3.0
    assert json.loads(values["loop_late_over_10ms_latest"]) == []  # 8 ms: not among the worst


def test_the_next_wake_up_starts_a_new_account_and_start_renders_are_apart():
    timing = LoopTiming()
    timing.timed("render", lambda: _spin(0.003), start=True)  # an episode's first render (its reset)
    timing.timed("step", lambda: None, counted=False)  # before the first episode: not counted
    assert timing.render_max_ms == 0.0 and timing.start_render_max_ms >= 3.0
    timing.woke(5.0)
    timing.late(5.001, 4.0, episode=0, sim_s=0.0)  # under EVENT_MS: counted in the maximum only
    assert not timing.events and timing.late_max_ms == 4.0
    timing.late(5.002, 12.0, episode=0, sim_s=0.01, tick_sent_at=4.99, answered_at=4.994)
    assert timing.events[-1]["answer_ms"] == 4.0
    assert timing.events[-1]["steps"] == 0 and timing.events[-1]["renders"] == 0
    assert timing.late_over_10ms == 1 and list(timing.worst) == [timing.events[-1]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["woke", "late", "step", "render"]),
                          st.floats(min_value=0.0, max_value=1e3, allow_nan=False)), max_size=80))
def test_any_sequence_keeps_the_latest_events_and_valid_json(ops):
    timing = LoopTiming(event_ms=5.0, keep=4)
    now = 0.0
    over_event = 0
    for op, x in ops:
        now += x / 1e3
        if op == "woke":
            timing.woke(now, deadline=now - x / 2e3 if x > 500 else None)
        elif op == "late":
            timing.late(now, x, episode=1, sim_s=now)
            over_event += x > 5.0
        else:
            timing.timed(op, lambda: None)
    values = timing.values()
    latest = json.loads(values["loop_late_latest"])
    assert len(latest) == min(4, over_event) and int(values["loop_late_events"]) == over_event
    assert all(e["late_ms"] > 5.0 for e in latest)
    worst = json.loads(values["loop_late_over_10ms_latest"])
    assert len(worst) == min(4, int(values["loop_late_over_10ms"])) and all(e["late_ms"] > 10.0 for e in worst)
    assert float(values["loop_late_max_ms"]) >= max((e["late_ms"] for e in latest), default=0.0)
    assert all(float(values[k]) >= 0 for k in ("loop_wake_late_max_ms", "step_max_ms", "render_max_ms"))


def test_a_controllers_answer_is_kept_when_late_or_slow_to_leave():
    timing = AnswerTiming(control_rate=50, event_ms=5.0)
    ms = 1_000_000
    timing.answered(1_000 * ms, clock_in_ns=100 * ms, joint_in_ns=101 * ms, written_ns=102 * ms)
    timing.answered(1_020 * ms, clock_in_ns=120 * ms, joint_in_ns=121 * ms, written_ns=122 * ms)  # on time
    assert not timing.events
    timing.answered(1_040 * ms, clock_in_ns=150 * ms, joint_in_ns=151 * ms, written_ns=153 * ms)  # 31 ms after
    timing.answered(1_060 * ms, clock_in_ns=None, joint_in_ns=161 * ms, written_ns=168 * ms)  # 7 ms of own work
    late, slow = timing.events
    assert late["since_previous_ms"] == 31.0 and late["act_ms"] == 2.0 and late["joint_after_clock_ms"] == 1.0
    assert late["stamp_ns"] == 1_040 * ms and late["clock_in_ns"] == 150 * ms
    assert slow["act_ms"] == 7.0 and slow["joint_after_clock_ms"] is None
    timing.end_episode()  # a new episode's first answer has no period before it
    timing.answered(2_000 * ms, clock_in_ns=900 * ms, joint_in_ns=900 * ms, written_ns=901 * ms)
    values = timing.values()
    assert values["answers_timed"] == "5" and values["answers_late"] == "2"
    assert float(values["answer_act_max_ms"]) == 7.0 and float(values["answer_joint_after_clock_max_ms"]) == 1.0
    assert json.loads(values["answers_late_latest"]) == [late, slow]
