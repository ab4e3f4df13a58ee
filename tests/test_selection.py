"""ActionSelector, the one door from chunks to commands (policy_node, in-process evaluation,
takeover collection): the latency rule and the hold against a naive reference, the
asynchronous parts policy_node uses, and select_action on a real (tiny) policy."""
import numpy as np
import pytest
import torch

from arm_act.policy.config import PolicyConfig
from arm_act.policy.model import ACTPolicy
from arm_act.policy.normalizer import Normalizer
from arm_act.policy.runtime import ARM_LOWER, ARM_UPPER, GRIPPER_RANGE, CommandLimiter, PolicyRuntime
from arm_act.policy.selection import ActionSelector

pytestmark = pytest.mark.unit

K = 6
POSE = np.array([0.0, -0.25, 0.0, -2.35, 0.0, 2.1, 0.785, 0.04, 0.04])  # (9,) the reset pose
INSTRUCTION = "put the red block in the box"


def _runtime(execution="ensemble", m=0.1):
    """The gripper continuous: these tests follow the executor's values through the selector
    (test_runtime.py tests the binary gripper command)."""
    torch.manual_seed(0)
    config = PolicyConfig(image_size=32, patch_size=16, width=32, heads=4, encoder_layers=1, chunk_size=K,
                          dropout=0.0)
    normalizer = Normalizer(np.zeros(9), np.ones(9), np.zeros(8), np.full(8, 0.1))
    return PolicyRuntime(ACTPolicy(config), normalizer, execution=execution, m=m, gripper="continuous")


def _chunks(n, seed=0):
    """n chunks (K, 8) near the reset pose, well inside the joint limits."""
    rng = np.random.default_rng(seed)
    action = np.append(POSE[:7], 0.02)
    return [action + rng.normal(scale=0.05, size=(K, 8)) for _ in range(n)]


def _reference(chunks, starts, latency, execution, m, ticks, max_step):
    """Naive: at tick t, the chunks computed at c <= t - latency; the ensemble is the
    offline weighted average (oldest first, exp(-m i), i the start time after the oldest's
    in 5-tick units: 100 ms at 50 Hz) of those covering t, the queue the
    newest one's row (its last past the end); nothing -> the previous command, else the
    reset pose. Then clip to the limits and to the previous command +- max_step."""
    commands, previous = [], None
    held = (POSE[:7].copy(), float(POSE[7]))
    for t in range(ticks):
        usable = [(c, ch) for c, ch in zip(starts, chunks, strict=True) if c + latency <= t]
        action = None
        if execution == "ensemble":
            covering = sorted(((c, ch) for c, ch in usable if c <= t < c + K), key=lambda item: item[0])
            rows = [ch[t - c] for c, ch in covering]
            if rows:
                w = np.exp(-m * np.array([c - covering[0][0] for c, _ in covering]) / 5.0)
                action = (w[:, None] * np.array(rows)).sum(0) / w.sum()
        elif usable:
            c, ch = max(usable, key=lambda item: item[0])
            action = ch[min(t - c, K - 1)]
        if action is not None:
            arm = np.clip(action[:7], ARM_LOWER, ARM_UPPER)
            base = POSE[:7] if previous is None else previous
            arm = np.clip(arm, base - max_step, base + max_step)
            previous = arm
            held = (arm, float(np.clip(action[7], *GRIPPER_RANGE)))
        commands.append(held)
    return commands


@pytest.mark.parametrize("execution", ["ensemble", "queue"])
@pytest.mark.parametrize("latency", [0, 1, 3, 7])
@pytest.mark.parametrize("every", [1, 5])
def test_commands_follow_the_latency_rule_of_a_naive_reference(execution, latency, every):
    ticks, speed, rate = 40, 1.0, 50.0
    starts = list(range(0, ticks, every))
    chunks = _chunks(len(starts))
    selector = ActionSelector(_runtime(execution), latency, CommandLimiter(speed, rate))
    selector.reset(POSE)
    got = []
    for t in range(ticks):
        if t in starts:
            selector.add_chunk(t, chunks[starts.index(t)])
        got.append(selector.command(t))
    expected = _reference(chunks, starts, latency, execution, 0.1, ticks, speed / rate)
    for t, ((arm, gripper), (arm_ref, gripper_ref)) in enumerate(zip(got, expected, strict=True)):
        np.testing.assert_allclose(arm, arm_ref, rtol=0, atol=1e-12, err_msg=f"tick {t}")
        assert gripper == pytest.approx(gripper_ref, abs=1e-12), f"tick {t}"
    if latency:  # before the first usable chunk: the reset pose, as a hold
        np.testing.assert_array_equal(got[0][0], POSE[:7])


def test_hold_before_the_first_chunk_and_after_the_last():
    selector = ActionSelector(_runtime("ensemble"), 2, CommandLimiter(3.0, 50.0))
    selector.reset(POSE)
    (chunk,) = _chunks(1)
    selector.add_chunk(0, chunk)
    arm, gripper = selector.command(1)  # computed at tick 0, usable from tick 2
    assert selector.holding and not selector.started
    np.testing.assert_array_equal(arm, POSE[:7])
    assert gripper == POSE[7]
    last = selector.command(K - 1)
    assert not selector.holding and selector.started and selector.last_start_tick == 0
    after = selector.command(K + 3)  # every chunk expired: hold the last command
    assert selector.holding
    np.testing.assert_array_equal(after[0], last[0])
    assert after[1] == last[1]


def test_asynchronous_parts_wait_for_due_chunks_only():
    selector = ActionSelector(_runtime("ensemble"), 3, CommandLimiter(3.0, 50.0))
    selector.reset(POSE)
    selector.expect(0)
    assert selector.is_known(0) and not selector.is_known(5)
    assert not selector.awaiting(2)  # usable from tick 3: tick 2 need not wait for it
    assert selector.awaiting(3)
    first, second = _chunks(2)
    selector.add_chunk(0, first)
    assert not selector.awaiting(3) and selector.is_known(0)
    selector.expect(5)
    selector.forget(5)  # failed: never waited for
    assert not selector.awaiting(100)
    # realtime: a chunk submitted with its usable tick acts at once, whatever latency_ticks says
    selector.add_chunk(4, second, usable_tick=4)
    selector.command(4)
    assert selector.last_start_tick == 4 and selector.started
    # reset forgets the chunks but not inferences already under way
    selector.add_chunk(6, second)
    selector.expect(7)
    selector.reset(POSE)
    selector.command(20)
    assert selector.holding and selector.last_start_tick == -1 and selector.awaiting(10)


def test_select_action_infers_on_camera_ticks_and_limits_the_command():
    runtime = _runtime("ensemble")
    selector = ActionSelector(runtime, 0, CommandLimiter(3.0, 50.0))
    selector.reset(POSE)
    images = {c: np.full((32, 32, 3), 100, np.uint8) for c in ("front", "wrist")}
    arm, gripper = selector.select_action(0, POSE, INSTRUCTION, images)
    prediction = selector.last_prediction
    assert prediction is not None and prediction.actions.shape == (K, 8)
    limiter = CommandLimiter(3.0, 50.0)
    limiter.reset(POSE[:7])
    expected_arm, expected_gripper = limiter(prediction.actions[0, :7], prediction.actions[0, 7])
    np.testing.assert_array_equal(arm, expected_arm)
    assert gripper == expected_gripper
    selector.select_action(1, POSE, INSTRUCTION, None)  # no images: no inference
    assert selector.last_prediction is prediction


def test_a_new_instruction_drops_the_old_goals_chunks():
    """select_action re-conditions as policy_node does: the first pair under a new
    instruction drops the chunks of the old one, which hold until the new chunk is due."""
    images = {c: np.full((32, 32, 3), 100, np.uint8) for c in ("front", "wrist")}
    other = "put the blue block in the box"
    commands = {}
    for second in (INSTRUCTION, other):
        selector = ActionSelector(_runtime("ensemble"), 1, CommandLimiter(1e6, 50.0))  # no speed limit
        selector.reset(POSE)
        selector.select_action(0, POSE, INSTRUCTION, images)
        first = selector.select_action(1, POSE, INSTRUCTION, None)  # the first chunk's row 0
        held = selector.select_action(2, POSE, second, images)
        new = selector.last_prediction.actions
        commands[second] = selector.select_action(3, POSE, second, None)[0]
        if second == other:
            np.testing.assert_array_equal(held[0], first[0])  # the old goal's chunk is gone: hold
            np.testing.assert_allclose(commands[second], np.clip(new[1, :7], ARM_LOWER, ARM_UPPER), atol=1e-9)
            assert selector.conditioned_on == other
    # The same instruction: tick 3 averages both chunks, so it differs from the new one alone.
    assert np.abs(commands[INSTRUCTION] - commands[other]).max() > 1e-6


def test_after_a_new_instruction_the_ensembling_weighs_by_m_after_change():
    """From a goal change to the episode's end the ensembling's m is the runtime's
    m_after_change (here < 0: newer chunks weigh more); the next episode is back at m."""
    images = {c: np.full((32, 32, 3), 100, np.uint8) for c in ("front", "wrist")}
    other = "put the blue block in the box"
    torch.manual_seed(0)
    runtime = _runtime("ensemble", m=0.1)
    runtime.m_after_change = -2.0
    selector = ActionSelector(runtime, 1, CommandLimiter(1e6, 50.0))  # no speed limit
    selector.reset(POSE)
    selector.select_action(0, POSE, INSTRUCTION, images)
    assert runtime.executor.m == 0.1
    selector.select_action(2, POSE, other, images)
    first = selector.last_prediction.actions
    assert runtime.executor.m == -2.0
    moved = POSE + np.array([0.05, -0.05, 0.05, 0.05, -0.05, 0.05, 0.0, 0.0, 0.0])
    selector.select_action(4, moved, other, images)
    second = selector.last_prediction.actions
    arm = selector.select_action(5, moved, other, None)[0]
    # Tick 5: rows 3 and 1 of the chunks started at ticks 2 and 4, i = 0 and (4 - 2) / 5 apart.
    weights = np.exp(2.0 * np.array([0.0, 0.4]))  # exp(-m i) with m = -2
    expected = (weights[0] * first[3, :7] + weights[1] * second[1, :7]) / weights.sum()
    np.testing.assert_allclose(arm, np.clip(expected, ARM_LOWER, ARM_UPPER), atol=1e-9)
    assert np.abs(first[3, :7] - second[1, :7]).max() > 1e-4  # the two chunks differ: the weights show
    selector.reset(POSE)  # the next episode
    assert runtime.executor.m == 0.1 and selector.conditioned_on is None
    selector.select_action(0, POSE, other, images)  # its first goal is no change
    assert runtime.executor.m == 0.1


def test_m_after_change_holds_for_after_change_s_then_m_smooths_again():
    images = {c: np.full((32, 32, 3), 100, np.uint8) for c in ("front", "wrist")}
    runtime = _runtime("ensemble", m=0.1)
    runtime.m_after_change, runtime.after_change_s = -1.0, 0.1  # 5 ticks at 50 Hz
    selector = ActionSelector(runtime, 1, CommandLimiter(1e6, 50.0))
    selector.reset(POSE)
    selector.select_action(0, POSE, INSTRUCTION, images)
    selector.select_action(10, POSE, "put the blue block in the box", images)  # the change, at tick 10
    for tick in range(11, 15):
        selector.select_action(tick, POSE, "put the blue block in the box", None)
        assert runtime.executor.m == -1.0
    selector.select_action(15, POSE, "put the blue block in the box", None)
    assert runtime.executor.m == 0.1


def test_bad_use_is_an_error():
    with pytest.raises(ValueError, match="latency_ticks=-1"):
        ActionSelector(_runtime(), -1, CommandLimiter(3.0, 50.0))
    with pytest.raises(RuntimeError, match="before reset"):
        ActionSelector(_runtime(), 1, CommandLimiter(3.0, 50.0)).command(0)
