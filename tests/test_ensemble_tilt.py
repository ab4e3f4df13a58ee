"""benchmarks/ensemble_tilt.py sets the ensembling's m for whole episodes: the runtime's own
reset and goal change must not put another m back on the executor."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from arm_act.policy.config import PolicyConfig
from arm_act.policy.model import ACTPolicy
from arm_act.policy.normalizer import Normalizer
from arm_act.policy.runtime import PolicyRuntime
from tests.benchmark_scripts import load

pytestmark = pytest.mark.unit


def _script():
    return load("ensemble_tilt")


def _runtime() -> PolicyRuntime:
    torch.manual_seed(0)
    config = PolicyConfig(image_size=32, patch_size=16, width=32, heads=4, encoder_layers=1, chunk_size=6,
                          dropout=0.0)
    normalizer = Normalizer(np.zeros(9), np.ones(9), np.zeros(8), np.full(8, 0.1))
    return PolicyRuntime(ACTPolicy(config), normalizer, m=0.1, m_after_change=0.1)


@pytest.mark.parametrize("horizon", [None, 15])
def test_m_holds_through_resets_and_goal_changes(horizon):
    runtime = _runtime()
    _script().set_ensembling(runtime, -0.5, horizon)
    for step in (runtime.reset, runtime.new_goal, runtime.reset):
        step()
        assert runtime.executor.m == -0.5
    assert (getattr(runtime.executor, "horizon", None)) == horizon


def test_after_a_change_m2_holds_for_the_window_then_m_again():
    runtime = _runtime()  # 50 Hz: a 0.2 s window is 10 ticks
    _script().set_ensembling(runtime, 0.1, after_change=-1.0, window_s=0.2)
    runtime.reset()
    runtime.executor.add_chunk(0, np.zeros((6, 8)))
    assert runtime.executor.action(0) is not None and runtime.executor.m == 0.1
    runtime.new_goal()  # at tick 40, say
    for tick in range(40, 50):
        runtime.executor.action(tick)
        assert runtime.executor.m == -1.0
    runtime.executor.action(50)
    assert runtime.executor.m == 0.1
    runtime.new_goal()  # a second change opens a new window
    runtime.executor.action(80)
    assert runtime.executor.m == -1.0
    runtime.reset()  # the next episode: m from its first tick
    runtime.executor.action(0)
    assert runtime.executor.m == 0.1
