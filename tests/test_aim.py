"""The aim correction (arm_act/assist/aim.py) and the URDF kinematics under it (arm_act/assist/kinematics.py):
the kinematics against PyBullet's, the corrector's states and bounds, generated inputs,
the way the target estimate travels through the ActionSelector, and, in closed loop with the
shipped checkpoint, an episode whose grasp misses without the correction and succeeds
with it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arm_act.assist.aim import AimCorrector, AimSettings
from arm_act.assist.kinematics import ChainKinematics
from arm_act.assist.panda import panda_aim
from arm_act.policy.runtime import ARM_LOWER, ARM_UPPER, CommandLimiter
from arm_act.policy.selection import ActionSelector
from arm_act.sim.backend import Backend, panda_urdf_path
from arm_act.sim.robot import HOME, Panda

BY_HAND = Path(__file__).resolve().parents[1] / "checkpoints" / "by_hand"  # a known grasp miss, below

RATE = 50.0
OPEN, CLOSED = 0.04, 0.0


@pytest.fixture(scope="module")
def kinematics():
    return ChainKinematics.from_urdf(panda_urdf_path(False), "panda_link0", "panda_grasptarget")


@pytest.fixture(scope="module")
def pybullet_panda():
    backend = Backend()
    backend.reset_world(0.01, 10, 0.0)
    yield backend, Panda(backend)
    backend.close()


def _low_pose(kinematics, height_above=0.02):
    """A joint pose (7,) with the grasp point low over the table, and that point (3,)."""
    q = np.asarray(HOME[:7], dtype=np.float64).copy()
    point = kinematics.position(q)
    # Walk the grasp point down with the Jacobian to `height_above` + 2 cm above the table.
    goal = np.array([point[0], point[1], 0.02 + height_above])
    for _ in range(50):
        point, J = kinematics.jacobian(q)
        q = q + J.T @ np.linalg.solve(J @ J.T + 1e-4 * np.eye(3), goal - point)
    return q, kinematics.position(q)


# ------------------------------------------------------------------ kinematics
@pytest.mark.unit
def test_the_urdf_chain_gives_pybullets_grasp_point_and_jacobian(kinematics, pybullet_panda):
    backend, panda = pybullet_panda
    assert kinematics.joint_names == tuple(f"panda_joint{i}" for i in range(1, 8))
    rng = np.random.default_rng(0)
    for _ in range(40):
        q = rng.uniform(panda.lower[:7], panda.upper[:7])
        full = list(q) + [0.02, 0.02]
        backend.reset_joints(panda.body, panda.joint_ids, full)
        expected = backend.link_pose(panda.body, panda.grasp_link)[0]
        linear, _ = backend.client.calculateJacobian(panda.body, panda.grasp_link, [0, 0, 0], full,
                                                     [0.0] * 9, [0.0] * 9)
        point, J = kinematics.jacobian(q)
        np.testing.assert_allclose(point, expected, atol=1e-6)  # PyBullet's float precision
        np.testing.assert_allclose(J, np.asarray(linear)[:, :7], atol=1e-9)
        np.testing.assert_allclose(kinematics.position(q), point)


@pytest.mark.unit
def test_bad_urdfs_and_angles_are_refused_with_the_reason(tmp_path, kinematics):
    with pytest.raises(ValueError, match="cannot read the URDF"):
        ChainKinematics.from_urdf(tmp_path / "missing.urdf", "a", "b")
    (tmp_path / "broken.urdf").write_text("<robot><joint name='j'")
    with pytest.raises(ValueError, match="cannot read the URDF"):
        ChainKinematics.from_urdf(tmp_path / "broken.urdf", "a", "b")
    with pytest.raises(ValueError, match="no joint chain from 'panda_link0' to 'nowhere'"):
        ChainKinematics.from_urdf(panda_urdf_path(False), "panda_link0", "nowhere")
    with pytest.raises(ValueError, match="'prismatic'"):
        ChainKinematics.from_urdf(panda_urdf_path(False), "panda_link0", "panda_leftfinger")
    (tmp_path / "nan.urdf").write_text(
        "<robot><link name='a'/><link name='b'/><joint name='j' type='revolute'><parent link='a'/>"
        "<child link='b'/><origin xyz='0 nan 0'/><axis xyz='0 0 1'/></joint></robot>")
    with pytest.raises(ValueError, match="three finite numbers"):
        ChainKinematics.from_urdf(tmp_path / "nan.urdf", "a", "b")
    with pytest.raises(ValueError, match="7 finite numbers"):
        kinematics.position(np.zeros(6))
    with pytest.raises(ValueError, match="7 finite numbers"):
        kinematics.jacobian(np.full(7, np.nan))


# ------------------------------------------------------------------ the corrector
@pytest.mark.unit
def test_far_above_the_block_the_arm_command_is_untouched(kinematics):
    aim = panda_aim(RATE)
    q, point = _low_pose(kinematics, height_above=0.20)
    aim.observe(point - np.array([0.03, 0.0, 0.20]))  # the block 20 cm below, 3 cm off
    np.testing.assert_array_equal(aim.correct(q, OPEN), q)
    assert aim.corrections == 0


@pytest.mark.unit
def test_low_over_the_block_the_grasp_point_moves_onto_the_estimate(kinematics):
    aim = panda_aim(RATE)
    q, point = _low_pose(kinematics, height_above=0.02)
    block = point + np.array([0.025, -0.01, -0.02])  # 2.7 cm from where the chunks aim
    aim.observe(block)
    moved = [kinematics.position(aim.correct(q, OPEN)) for _ in range(20)]
    steps = np.linalg.norm(np.diff(np.array([point] + moved), axis=0), axis=1)
    assert steps.max() <= 0.25 / RATE + 1e-4  # never faster than max_speed
    final = moved[-1]
    np.testing.assert_allclose(final[:2], block[:2], atol=1e-3)  # onto the estimate, horizontally
    assert abs(final[2] - point[2]) < 2e-3  # the hand's height is left alone
    assert aim.largest_shift == pytest.approx(np.linalg.norm(block[:2] - point[:2]), abs=1e-6)


@pytest.mark.unit
def test_the_shift_is_capped_and_ramps_in_with_height(kinematics):
    s = AimSettings()
    q, point = _low_pose(kinematics, height_above=0.02)
    aim = panda_aim(RATE)
    aim.observe(point + np.array([0.20, 0.0, -0.02]))  # a wild estimate 20 cm away
    for _ in range(40):
        arm = aim.correct(q, OPEN)
    assert np.linalg.norm(kinematics.position(arm)[:2] - point[:2]) == pytest.approx(s.max_shift, abs=1e-3)
    # Half-way between start_height and full_height: half the gap.
    mid = (s.start_height + s.full_height) / 2
    q_mid, p_mid = _low_pose(kinematics, height_above=mid)
    aim = panda_aim(RATE)
    aim.observe(p_mid + np.array([0.02, 0.0, -mid]))
    for _ in range(40):
        arm = aim.correct(q_mid, OPEN)
    assert kinematics.position(arm)[0] - p_mid[0] == pytest.approx(0.01, abs=1e-3)


@pytest.mark.unit
def test_the_aim_holds_while_closing_and_goes_after_the_lift(kinematics):
    s = AimSettings()
    q, point = _low_pose(kinematics, height_above=0.02)
    block = point + np.array([0.02, 0.0, -0.02])
    aim = panda_aim(RATE)
    aim.observe(block)
    for _ in range(20):
        aim.correct(q, OPEN)
    held = aim.shift.copy()
    assert np.linalg.norm(held) == pytest.approx(0.02, abs=1e-6)
    # Closing: new estimates are ignored (the hand hides the block) and the shift stays.
    for _ in range(10):
        aim.observe(block + np.array([0.0, 0.04, 0.0]))
        aim.correct(q, CLOSED)
    np.testing.assert_allclose(aim.shift, held)
    # Lifted: the shift goes back to 0 at release_speed.
    q_up, _ = _low_pose(kinematics, height_above=0.02 + s.lift_height + 0.02)
    norms = []
    for _ in range(40):
        aim.correct(q_up, CLOSED)
        norms.append(np.linalg.norm(aim.shift))
    assert np.all(np.diff(norms) <= 1e-12)
    assert norms[0] == pytest.approx(0.02 - s.release_speed / RATE, abs=1e-9)
    assert norms[-1] == 0.0
    np.testing.assert_array_equal(aim.correct(q_up, CLOSED), q_up)
    # Opened again (a re-grasp): the old estimate is gone, the next one aims the next grasp.
    aim.correct(q, OPEN)
    assert aim.target is None
    aim.observe(block)
    assert aim.target is not None


@pytest.mark.unit
def test_bad_estimates_and_commands_change_nothing(kinematics):
    q, point = _low_pose(kinematics)
    aim = panda_aim(RATE)
    for bad in (None, np.array([np.nan, 0.0, 0.0]), np.zeros(2), np.array([np.inf, 1.0, 1.0])):
        aim.observe(bad)
    assert aim.target is None
    np.testing.assert_array_equal(aim.correct(q, OPEN), q)
    aim.observe(point + np.array([0.02, 0.0, -0.02]))
    nan_arm = np.full(7, np.nan)
    assert np.isnan(aim.correct(nan_arm, OPEN)).all()  # passed on: the limiter and the executor refuse it
    for bad in ({"max_shift": 0.0}, {"smoothing": 1.0}, {"start_height": 0.05, "full_height": 0.07},
                {"release_speed": float("nan")}):
        with pytest.raises(ValueError, match="aim"):
            AimSettings(**bad)
    with pytest.raises(ValueError, match="control_rate"):
        AimCorrector(kinematics, control_rate=0.0)
    from arm_act.eval.in_process import PolicySettings

    for bad in (-1, 101, 1.5):
        with pytest.raises(ValueError, match=r"regrasps must be in 0 \.\. 100"):
            PolicySettings(regrasps=bad)
    with pytest.raises(ValueError, match="aim regrasps"):
        AimSettings(regrasps=-2)


@pytest.mark.unit
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1),
       offsets=st.lists(st.tuples(st.floats(-0.3, 0.3), st.floats(-0.3, 0.3), st.floats(-0.4, 0.1)),
                        min_size=1, max_size=6),
       grippers=st.lists(st.sampled_from([0.04, 0.036, 0.03, 0.01, 0.0]), min_size=5, max_size=40))
def test_any_sequence_keeps_the_shift_bounded_smooth_and_finite(kinematics, seed, offsets, grippers):
    """Generated poses, estimates and gripper commands: the shift never passes max_shift,
    never changes faster than max_speed, and the command stays finite."""
    s = AimSettings()
    rng = np.random.default_rng(seed)
    aim = panda_aim(RATE)
    previous = aim.shift.copy()
    for i, gripper in enumerate(grippers):
        q = rng.uniform(ARM_LOWER, ARM_UPPER)
        if i < len(offsets):
            aim.observe(kinematics.position(q) + np.array(offsets[i]))
        arm = aim.correct(q, gripper)
        assert np.all(np.isfinite(arm))
        assert np.linalg.norm(aim.shift) <= s.max_shift + 1e-9
        assert np.linalg.norm(aim.shift - previous) <= s.max_speed / RATE + 1e-9
        assert aim.shift[2] == 0.0
        previous = aim.shift.copy()


@pytest.mark.unit
def test_the_grasp_check_finds_a_grasp_closed_on_nothing(kinematics):
    aim = AimCorrector(kinematics, RATE, AimSettings(regrasps=2))
    q, point = _low_pose(kinematics)
    aim.observe(point + np.array([0.01, 0.0, -0.02]))
    aim.correct(q, OPEN)
    assert not aim.missed(OPEN, 0.001)  # open: nothing to check
    aim.correct(q, CLOSED)
    assert not aim.missed(CLOSED, 0.02)  # closed on a block: the fingers stop 1.6-2.4 cm apart
    assert not aim.missed(CLOSED, float("nan"))
    assert aim.missed(CLOSED, 0.004)  # closed past 8 mm: nothing between them
    assert aim.target is None and not aim.closed and aim.misses == 1
    assert not aim.missed(CLOSED, 0.004)  # once per grasp: the caller reopens
    aim.correct(q, CLOSED)
    assert aim.missed(CLOSED, 0.002)
    aim.correct(q, CLOSED)
    assert not aim.missed(CLOSED, 0.002)  # at most `regrasps` an episode
    aim.reset()
    aim.correct(q, CLOSED)
    assert aim.missed(CLOSED, 0.002)
    off = panda_aim(RATE, regrasps=0)  # no grasp check
    off.correct(q, CLOSED)
    assert not off.missed(CLOSED, 0.0)


# ------------------------------------------------------------------ through the ActionSelector
class _FixedRuntime:
    """A chunk executor that replays one action: enough to watch the aim inside the selector."""

    def __init__(self, arm):
        self.action_row = (np.asarray(arm, dtype=np.float64), OPEN)
        self.chunks = 0

    def reset(self):
        self.chunks = 0

    def add_chunk(self, start, chunk):
        self.chunks += 1

    def action(self, tick):
        return None if self.chunks == 0 else (self.action_row[0].copy(), self.action_row[1])


@pytest.mark.unit
def test_the_estimate_reaches_the_aim_when_its_chunk_becomes_usable(kinematics):
    q, point = _low_pose(kinematics)
    block = point + np.array([0.02, 0.0, -0.02])
    runtime = _FixedRuntime(q)
    aim = panda_aim(RATE)
    selector = ActionSelector(runtime, 2, CommandLimiter(3.0, RATE), aim=aim)
    selector.reset(np.append(q, [0.04, 0.04]))
    selector.add_chunk(0, np.zeros((4, 8)), target=block)
    selector.command(0)
    selector.command(1)
    assert aim.target is None  # latency 2: not usable before tick 2
    arm, _ = selector.command(2)
    np.testing.assert_allclose(aim.target, block)
    assert kinematics.position(arm)[0] > point[0]  # moving toward the block
    selector.reset(np.append(q, [0.04, 0.04]))  # a new episode forgets the estimate and the shift
    assert aim.target is None and not np.any(aim.shift)
    plain = ActionSelector(_FixedRuntime(q), 0, CommandLimiter(3.0, RATE))
    plain.reset(np.append(q, [0.04, 0.04]))
    plain.add_chunk(0, np.zeros((4, 8)), target=block)
    np.testing.assert_array_equal(plain.command(0)[0], q)  # without an aim: the action as it is


@pytest.mark.unit
def test_a_missed_grasp_reopens_and_drops_the_chunks_that_carry_it_on(kinematics):
    q, point = _low_pose(kinematics)
    runtime = _FixedRuntime(q)
    runtime.action_row = (q, CLOSED)  # the chunks close the gripper (and would lift)
    aim = AimCorrector(kinematics, RATE, AimSettings(regrasps=1, retry="policy"))  # the chunks retry
    selector = ActionSelector(runtime, 1, CommandLimiter(3.0, RATE), aim=aim)
    selector.reset(np.append(q, [0.04, 0.04]))
    selector.add_chunk(0, np.zeros((4, 8)))
    closed = np.append(q, [0.02, 0.02])  # holding a block
    assert selector.command(1, closed)[1] == CLOSED
    assert selector.command(2, closed)[1] == CLOSED
    empty = np.append(q, [0.003, 0.003])  # closed on nothing
    selector.add_chunk(2, np.zeros((4, 8)))  # from the pair of tick 2: still carries on the grasp
    selector.add_chunk(3, np.zeros((4, 8)))  # ... and of tick 3, the tick of the check
    arm, gripper = selector.command(3, empty)
    assert gripper == pytest.approx(0.04) and selector.holding and runtime.chunks == 0
    np.testing.assert_allclose(arm, q)
    assert selector.command(4, empty)[1] == pytest.approx(0.04)  # holds open until a new chunk
    selector.add_chunk(4, np.zeros((4, 8)))  # the first pair after the check
    assert selector.command(5, np.append(q, [0.03, 0.03]))[1] == CLOSED and runtime.chunks == 1
    assert aim.misses == 1


# ------------------------------------------------------------------ closed loop, shipped checkpoint
@pytest.mark.e2e
def test_a_grasp_the_chunks_miss_succeeds_with_the_aim_correction(capsys):
    """Seed 100035 (2 blocks): the hand-made checkpoint's chunks (checkpoints/by_hand, the
    shipped one until 4 December 2026, with which the aim correction was built) come down
    2.1-2.7 cm short of the green block and close on nothing, while its target head places
    the block within 0.3-1.3 cm. `arm-act eval` runs it with --assist (the correction) and
    without (the default: the network alone)."""
    import json

    from arm_act.cli import main as cli

    args = ["eval", "--policy", str(BY_HAND), "--episodes", "1", "--seed", "100035",
            "--threads", "1", "--latency-ticks", "1", "--time-limit", "8", "--json"]
    records = {}
    for extra in ([], ["--assist"]):
        assert cli.main([*args, *extra]) == 0
        summary = json.loads(capsys.readouterr().out)
        records[bool(extra)] = (summary["policy"]["assist"], summary["results"][0])
    assist, record = records[False]
    assert assist is False and not record["success"] and record["first_grasp_missed"]
    assert not record["first_grasp_held"] and record["first_grasp_xy_cm"] > 2.0
    assert "aim_shift_cm_max" not in record
    assist, record = records[True]
    assert assist is True and record["success"] and not record["first_grasp_missed"]
    assert record["first_grasp_held"] and record["first_grasp_xy_cm"] < 2.0
    assert 1.0 < record["aim_shift_cm_max"] <= 100 * AimSettings().max_shift
