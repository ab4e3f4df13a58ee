"""The inference pipeline's stages one at a time, without a network or ROS: the latency gate,
the command limiter and the selector's diagnostics (the chunk executor and the grasp assist
have their own files: test_selection.py, test_aim.py, test_regrasp.py)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arm_act.policy.latency_gate import LatencyGate
from arm_act.policy.runtime import ARM_LOWER, ARM_UPPER, CommandLimiter
from arm_act.policy.selection import ActionSelector

pytestmark = pytest.mark.unit


def _chunk(value: float, k: int = 4) -> np.ndarray:
    return np.full((k, 8), value)


def test_a_chunk_becomes_due_at_its_usable_tick_oldest_pair_first():
    gate = LatencyGate(2)
    gate.expect(3)
    gate.expect(1)
    assert gate.awaiting(3) and not gate.awaiting(2)  # tick 1's chunk is usable from 3
    assert gate.add(3, _chunk(3.0), target=np.array([0.5, 0.0, 0.1]))
    assert gate.add(1, _chunk(1.0))
    assert gate.is_known(1) and gate.is_known(3) and not gate.is_known(2)
    assert not gate.awaiting(10)
    assert gate.due(2) == []
    first = gate.due(3)
    assert [c.start for c in first] == [1] and first[0].target is None
    later = gate.due(9)
    assert [c.start for c in later] == [3] and np.allclose(later[0].target, [0.5, 0.0, 0.1])
    assert gate.due(100) == []  # each chunk leaves the gate once
    assert gate.diagnostics() == {"latency_ticks": 2, "chunks_waiting": 0, "chunks_computing": 0,
                                  "chunks_dropped": 0}


def test_an_explicit_usable_tick_overrides_the_latency_rule():
    gate = LatencyGate(5)
    gate.add(10, _chunk(0.0), usable_tick=10)  # realtime: usable as soon as it exists
    assert [c.start for c in gate.due(10)] == [10]


def test_drop_until_discards_waiting_chunks_and_those_from_earlier_pairs():
    gate = LatencyGate(1)
    gate.add(4, _chunk(4.0))
    gate.add(5, _chunk(5.0))
    gate.expect(6)
    gate.drop_until(6)  # a grasp reopened on tick 6: pairs up to 6 still saw it closed
    assert gate.due(100) == []
    assert not gate.add(6, _chunk(6.0))  # computed from tick 6's pair: dropped on arrival
    assert gate.add(7, _chunk(7.0))
    assert gate.diagnostics()["chunks_dropped"] == 3 and gate.diagnostics()["chunks_computing"] == 0
    gate.reset()
    assert gate.add(2, _chunk(2.0)) and gate.diagnostics()["chunks_dropped"] == 0


def test_forget_stops_the_wait_for_a_failed_inference():
    gate = LatencyGate(0)
    gate.expect(8)
    assert gate.awaiting(8)
    gate.forget(8)
    assert not gate.awaiting(8) and not gate.is_known(8)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_a_latency_that_is_not_a_whole_number_of_ticks_is_refused(bad):
    with pytest.raises(ValueError, match="latency_ticks"):
        LatencyGate(bad)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 8)), max_size=12), st.integers(0, 6),
       st.integers(0, 60))
def test_the_gate_never_releases_a_chunk_early_and_never_loses_one(arrivals, latency, until):
    gate = LatencyGate(latency)
    for start, _ in arrivals:
        gate.add(start, _chunk(float(start)))
    released = []
    for tick in range(until + 1):
        for chunk in gate.due(tick):
            assert chunk.start + latency <= tick
            released.append(chunk.start)
    left = [start for start, _ in arrivals if start + latency > until]
    assert sorted(released + left) == sorted(start for start, _ in arrivals)
    assert gate.diagnostics()["chunks_waiting"] == len(left)


def test_the_limiter_counts_the_commands_it_changed():
    limiter = CommandLimiter(max_joint_speed=1.0, control_rate=50.0)  # 0.02 rad a tick
    middle = (ARM_LOWER + ARM_UPPER) / 2
    limiter.reset(middle)
    arm, gripper = limiter(middle + 0.01, 0.5)
    assert np.allclose(arm, middle + 0.01) and gripper == 0.04
    assert limiter.diagnostics()["commands_clamped"] == 0
    arm, _ = limiter(middle + 1.0, 0.02)  # too fast: bounded to the step
    assert np.allclose(arm, middle + 0.03) and limiter.diagnostics()["commands_clamped"] == 1
    limiter.reset()
    arm, _ = limiter(ARM_UPPER + 1.0, 0.02)  # beyond the joint limits
    assert np.allclose(arm, ARM_UPPER) and limiter.diagnostics()["commands_clamped"] == 1
    limiter(np.full(7, np.nan), 0.02)  # a NaN command never counts as passed unchanged
    assert limiter.diagnostics()["commands_clamped"] == 2


class _OneChunkRuntime:
    """The executor part of a PolicyRuntime: the newest chunk's row for the tick."""

    def __init__(self):
        self.chunks = {}

    def reset(self):
        self.chunks.clear()

    def add_chunk(self, start, actions):
        self.chunks[start] = actions

    def action(self, tick):
        usable = [s for s in self.chunks if s <= tick < s + len(self.chunks[s])]
        if not usable:
            return None
        row = self.chunks[max(usable)][tick - max(usable)]
        return row[:7].copy(), float(row[7])


def test_the_selector_gathers_each_stages_diagnostics():
    selector = ActionSelector(_OneChunkRuntime(), 1, CommandLimiter(3.0, 50.0))
    selector.reset(np.zeros(9))
    selector.add_chunk(0, _chunk(0.0))
    arm, _ = selector.command(0)
    assert selector.diagnostics()["holding"] and selector.diagnostics()["chunks_waiting"] == 1
    arm, gripper = selector.command(1)
    d = selector.diagnostics()
    assert not d["holding"] and d["last_chunk_tick"] == 0 and d["chunks_waiting"] == 0
    assert d["commands_clamped"] == 0 and d["latency_ticks"] == 1
    assert "grasps_reopened" not in d  # no assist, no assist diagnostics
    assert selector.latency_ticks == 1
