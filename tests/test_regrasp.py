"""The re-grasp reflex (arm_act/assist/regrasp.py): its phases against the URDF kinematics, its bounds
under generated inputs, how the ActionSelector hands a missed grasp to it and back to the
chunks, and, in closed loop with the shipped checkpoint, a pushed block that the chunks'
own retries never grasp and the reflex does."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arm_act.assist.aim import AimCorrector, AimSettings
from arm_act.assist.panda import panda_kinematics
from arm_act.assist.regrasp import CLOSE, DESCEND, LOOK, OVER, RISE, RegraspReflex, RegraspSettings, rotation_error
from arm_act.policy.runtime import CommandLimiter
from arm_act.policy.selection import ActionSelector
from arm_act.sim.robot import HOME

RATE = 50.0


def _low_pose(kinematics, height=0.02):
    """A joint pose (7,) with the grasp point `height` above the table, hand down, and that point."""
    q = np.asarray(HOME[:7], dtype=np.float64).copy()
    point = kinematics.position(q)
    goal = np.array([point[0], point[1], height])
    for _ in range(60):
        point, J = kinematics.jacobian(q)
        q = q + J.T @ np.linalg.solve(J @ J.T + 1e-4 * np.eye(3), goal - point)
    return q, kinematics.position(q)


def _run(reflex, block, measured_lag=False, limit=2000):
    """Step the reflex to its end, feeding `block` as the estimate every 5th tick (a 10 Hz
    camera); returns the phases seen, the commands and the gripper commands."""
    phases, arms, grippers = [], [], []
    measured = None
    for tick in range(limit):
        if tick % 5 == 0:
            reflex.observe(block)
        arm, gripper = reflex.step(measured)
        measured = arm if not measured_lag else (arm if measured is None else 0.5 * (measured + arm))
        phases.append(reflex.phase)
        arms.append(arm)
        grippers.append(gripper)
        if not reflex.active:
            break
    return phases, arms, grippers


@pytest.mark.unit
def test_the_reflex_rises_looks_moves_over_the_estimate_descends_and_closes():
    kin = panda_kinematics()
    q, point = _low_pose(kin)
    block = point + np.array([0.04, -0.03, 0.0])  # missed 5 cm beside the block
    reflex = RegraspReflex(kin, RATE)
    reflex.start(q)
    _, rotation = kin.pose(q)
    phases, arms, grippers = _run(reflex, block, measured_lag=True)
    order = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    assert order == [RISE, LOOK, OVER, DESCEND, CLOSE]
    points = np.array([kin.position(a) for a in arms])
    rise_end = phases.index(LOOK)
    assert points[rise_end, 2] == pytest.approx(point[2] + RegraspSettings().rise, abs=0.005)
    np.testing.assert_allclose(points[:rise_end, :2], np.repeat(point[None, :2], rise_end, 0), atol=0.003)
    over_start = phases.index(OVER)
    assert over_start - rise_end >= 5 * (RegraspSettings().looks - 1)  # waited for the looks, holding still
    np.testing.assert_allclose(points[rise_end:over_start], np.repeat(points[rise_end][None], over_start - rise_end,
                                                                      0), atol=1e-9)
    np.testing.assert_allclose(points[-1], block, atol=0.005)  # closed where the estimate said
    steps = np.linalg.norm(np.diff(points, axis=0), axis=1)
    assert steps.max() <= RegraspSettings().speed / RATE + 1e-6  # never faster than its speed
    assert max(np.degrees(np.linalg.norm(rotation_error(kin.pose(a)[1], rotation))) for a in arms) < 1.0
    close_start = phases.index(CLOSE)
    assert all(g > 0.03 for g in grippers[:close_start]) and all(g == 0.0 for g in grippers[close_start:])
    assert (len(phases) - close_start) == pytest.approx(RegraspSettings().close_time * RATE, abs=1)
    assert not reflex.active and reflex.starts == 1


@pytest.mark.unit
def test_without_an_estimate_the_reflex_waits_up_there_until_its_timeout():
    kin = panda_kinematics()
    q, point = _low_pose(kin)
    reflex = RegraspReflex(kin, RATE, RegraspSettings(timeout=2.0))
    reflex.start(q)
    phases, arms, _ = _run(reflex, np.array([np.nan, 0.0, 0.0]))  # every estimate unusable
    assert set(phases) <= {RISE, LOOK, None} and LOOK in phases
    assert len(phases) == pytest.approx(2.0 * RATE, abs=2)
    assert kin.position(arms[-1])[2] > point[2] + 0.15  # it never came down blind


@pytest.mark.unit
@pytest.mark.parametrize("field, value", [("rise", 0.0), ("speed", -1.0), ("timeout", float("nan")),
                                          ("looks", 0), ("iterations", 1.5), ("open_width", float("inf"))])
def test_bad_reflex_settings_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        RegraspSettings(**{field: value})


@pytest.mark.unit
def test_an_unknown_retry_is_refused_and_policy_has_no_reflex():
    kin = panda_kinematics()
    with pytest.raises(ValueError, match="retry='again' must be one of"):
        AimSettings(retry="again")
    assert AimCorrector(kin, RATE, AimSettings(retry="policy")).reflex is None
    assert AimCorrector(kin, RATE).reflex is not None  # the default


@pytest.mark.unit
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(offset=st.lists(st.floats(-0.08, 0.08), min_size=3, max_size=3),
       noise=st.lists(st.one_of(st.floats(-0.5, 0.5), st.just(float("nan")), st.just(float("inf"))),
                      min_size=30, max_size=30),
       lag=st.booleans())
@pytest.mark.slow
def test_the_reflex_ends_with_finite_commands_for_any_estimates(offset, noise, lag):
    """Generated estimates (noisy, NaN, infinite) and a lagging arm: every command is finite,
    the grasp point never moves faster than the reflex's speed, and the reflex ends by its timeout."""
    kin = panda_kinematics()
    q, point = _low_pose(kin)
    reflex = RegraspReflex(kin, RATE, RegraspSettings(timeout=3.0))
    reflex.start(q)
    measured, last = None, kin.position(q)
    for tick in range(400):
        if tick % 5 == 0:
            k = (tick // 5) % 10
            reflex.observe(point + np.asarray(offset) + np.asarray(noise[3 * k: 3 * k + 3]) * 0.1)
        arm, gripper = reflex.step(measured)
        assert np.all(np.isfinite(arm)) and np.isfinite(gripper)
        now = kin.position(arm)
        assert np.linalg.norm(now - last) <= RegraspSettings().speed / RATE + 1e-6
        last = now
        measured = arm if not lag else (arm if measured is None else 0.7 * measured + 0.3 * arm)
        if not reflex.active:
            break
    assert not reflex.active and tick <= 3.0 * RATE + 1


class _Runtime:
    """A chunk executor stand-in: its action is a fixed row once any chunk was added."""

    def __init__(self, q, gripper):
        self.row, self.gripper, self.chunks = q, gripper, 0

    def reset(self):
        self.chunks = 0

    def add_chunk(self, start, chunk):
        self.chunks += 1

    def action(self, tick):
        return None if self.chunks == 0 else (self.row.copy(), self.gripper)


@pytest.mark.unit
def test_the_selector_hands_a_missed_grasp_to_the_reflex_and_back_to_the_chunks():
    kin = panda_kinematics()
    q, point = _low_pose(kin)
    block = point + np.array([0.035, 0.02, 0.0])
    runtime = _Runtime(q, 0.0)  # the chunks close the gripper where the arm is
    aim = AimCorrector(kin, RATE, AimSettings(regrasps=2))
    selector = ActionSelector(runtime, 1, CommandLimiter(3.0, RATE), aim=aim)
    selector.reset(np.append(q, [0.04, 0.04]))
    selector.add_chunk(0, np.zeros((4, 8)))
    assert selector.command(1, np.append(q, [0.02, 0.02]))[1] == 0.0
    empty = np.append(q, [0.003, 0.003])  # closed on nothing
    arm, gripper = selector.command(2, empty)
    assert aim.misses == 1 and aim.reflex.active and gripper > 0.03 and runtime.chunks == 0
    d = selector.diagnostics()
    assert d["grasps_reopened"] == 1 and d["regrasp_reflex_active"] and aim.retrying
    tick, phases, measured = 3, [], empty
    while aim.reflex.active and tick < 2000:
        if tick % 5 == 0:  # camera pairs keep coming: their estimates aim, their actions wait
            selector.add_chunk(tick - 1, np.zeros((4, 8)), target=block)
        arm, gripper = selector.command(tick, measured)
        measured = np.append(arm, [0.02, 0.02] if gripper == 0.0 else [0.04, 0.04])
        phases.append(aim.reflex.phase)
        tick += 1
    assert not aim.reflex.active and runtime.chunks == 0 and CLOSE in phases
    np.testing.assert_allclose(kin.position(arm), block, atol=0.006)
    assert aim.closed and not np.any(aim.shift)  # handed back: the grasp check armed, no shift
    held = arm.copy()
    selector.add_chunk(tick - 3, np.zeros((4, 8)))  # a pair from during the close: dropped
    arm, gripper = selector.command(tick, measured)
    assert runtime.chunks == 0 and selector.holding and gripper == 0.0
    np.testing.assert_allclose(arm, held)
    d = selector.diagnostics()
    assert not d["regrasp_reflex_active"] and d["chunks_dropped"] >= 1 and d["grasps_reopened"] == 1
    selector.add_chunk(tick, np.zeros((4, 8)))  # the first pair after the hand-back drives
    selector.command(tick + 1, measured)
    assert runtime.chunks == 1 and aim.misses == 1


@pytest.mark.e2e
def test_a_pushed_block_the_chunks_never_grasp_is_grasped_by_the_reflex():
    """Robustness seed 400017 (4 blocks, the named block pushed 4.7 cm during the descent): with
    the chunks retrying, three reopened grasps close beside the block; with the reflex the first
    retry holds it and the block reaches the box. What the chunks do after their third miss
    differs between CPUs (their float kernels differ): the episode times out on some, a fourth
    grasp holds on others."""
    from arm_act.common.episodes import episode_spec, parse_blocks
    from arm_act.eval.in_process import PolicyAgent
    from arm_act.policy.runtime import PolicyRuntime
    from arm_act.sim import ArmEnv
    from arm_act.sim.config import SimConfig
    from arm_act.sim.perturb import perturbation
    from arm_act.sim.rollout import run_episode

    # checkpoints/by_hand: the shipped checkpoint until 4 December 2026, with which the reflex
    # was built; pushed seed 400017 is a known first-grasp miss of it.
    runtime = PolicyRuntime.from_checkpoint(Path(__file__).resolve().parents[1] / "checkpoints" / "by_hand", threads=1)
    spec = episode_spec(17, 400000, parse_blocks("2-5"))
    results = {}
    with ArmEnv(SimConfig(), perturbation=perturbation("push")) as env:
        for retry in ("policy", "reflex"):
            agent = PolicyAgent(runtime, 1, retry=retry, assist=True)
            results[retry] = (run_episode(env, agent, spec.seed, spec.n_blocks).status,
                              agent.selector.aim.misses)
    assert results["policy"][1] == 3
    assert results["reflex"] == ("success", 1)
