"""The chunk executors and the runtime: the ensembler against an offline weighted average
(as LeRobot tests its ACTTemporalEnsembler), the queue, latency offsets, bad input."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arm_act.policy.config import PolicyConfig
from arm_act.policy.model import ACTPolicy
from arm_act.policy.normalizer import Normalizer
from arm_act.policy.runtime import (
    GRIPPER_RANGE,
    ChunkQueue,
    PolicyRuntime,
    TemporalEnsembler,
    gripper_command,
    make_executor,
)

pytestmark = pytest.mark.unit

K, A = 6, 3


def _chunks(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(K, A)) for _ in range(n)]


@pytest.mark.parametrize("m", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("every", [1, 2, 5])
def test_ensembler_equals_offline_weighted_average(m, every):
    chunks = _chunks(12)
    starts = [i * every for i in range(len(chunks))]
    ensembler = TemporalEnsembler(m, K, A)
    for tick in range(starts[-1] + K):
        for start, chunk in zip(starts, chunks, strict=True):
            if start == tick:
                ensembler.add_chunk(start, chunk)
        got = ensembler.action(tick)
        # Offline: every chunk added so far that covers the tick, oldest first, weighted
        # exp(-m i) with i the start time after the oldest's in 100 ms units (5 ticks at
        # 50 Hz): ACT's chunk index when chunks start every 5 ticks.
        covering = [(s, c[tick - s]) for s, c in zip(starts, chunks, strict=True) if s <= tick < s + K]
        rows = np.array([row for _, row in covering])
        weights = np.exp(-m * np.array([s - covering[0][0] for s, _ in covering]) / 5.0)
        expected = (weights[:, None] * rows).sum(0) / weights.sum()
        np.testing.assert_allclose(got, expected, rtol=1e-12)
        if every == 5:  # exactly ACT's per-chunk rule
            index_weights = np.exp(-m * np.arange(len(rows)))
            assert np.array_equal(got, (index_weights[:, None] * rows).sum(0) / index_weights.sum())


def test_ensembling_weighs_time_so_a_faster_camera_keeps_the_same_horizon():
    # The same predictions, as chunks every 5 ticks or every tick: the weight on chunks that
    # started at least 25 ticks (0.5 s) before the tick is the same share either way, where a
    # per-chunk count would give the every-tick ensembler's oldest chunks most of it.
    m, chunk_len, tick = 0.1, 50, 49
    shares = {}
    for every in (5, 1):
        starts = np.arange(0, tick + 1, every, dtype=np.float64)
        weights = np.exp(-m * (starts - starts[0]) / 5.0)
        shares[every] = weights[tick - starts >= 25].sum() / weights.sum()
    assert abs(shares[5] - shares[1]) < 0.05
    ensembler = TemporalEnsembler(m, chunk_len, 1, interval_ticks=5.0)
    for start in range(tick + 1):  # every chunk predicts its own start time: the action is the weighted start
        ensembler.add_chunk(start, np.full((chunk_len, 1), float(start)))
    weights = np.exp(-m * np.arange(tick + 1) / 5.0)
    assert ensembler.action(tick)[0] == pytest.approx((weights * np.arange(tick + 1)).sum() / weights.sum())
    with pytest.raises(ValueError, match="interval_ticks=0"):
        TemporalEnsembler(m, K, A, interval_ticks=0)


def _average(chunks, starts, tick, m):
    """ACT's average of the chunks covering `tick`, weighted exp(-m i), i in 5-tick units."""
    covering = [(s, c[tick - s]) for s, c in zip(starts, chunks, strict=True) if s <= tick < s + K]
    weights = np.exp(-m * np.array([s - covering[0][0] for s, _ in covering]) / 5.0)
    return (weights[:, None] * np.array([row for _, row in covering])).sum(0) / weights.sum()


@pytest.mark.parametrize("ticks", [0, 3, 7])
def test_a_tilt_weighs_by_its_m_for_its_ticks_then_by_the_m_of_before(ticks):
    chunks, starts = _chunks(10), list(range(10))
    ensembler = TemporalEnsembler(0.1, K, A)
    ensembler.tilt(-1.0, ticks)
    for tick in range(10):
        ensembler.add_chunk(starts[tick], chunks[tick])
        m = -1.0 if tick < ticks else 0.1  # counted from the first action() after the tilt
        np.testing.assert_allclose(ensembler.action(tick), _average(chunks, starts, tick, m), rtol=1e-12)
        assert ensembler.m == m


def test_a_tilt_ends_at_reset_and_a_second_tilt_goes_back_to_the_first_m():
    ensembler = TemporalEnsembler(0.1, K, A)
    ensembler.tilt(-1.0, 5)
    ensembler.tilt(-2.0, 5)  # before the first ended: back to 0.1 after, not to -1.0
    for tick in range(5):
        ensembler.action(tick)
        assert ensembler.m == -2.0
    ensembler.action(5)
    assert ensembler.m == 0.1
    ensembler.tilt(-1.0, None)  # until reset
    ensembler.action(1000)
    assert ensembler.m == -1.0
    ensembler.reset()
    assert ensembler.m == 0.1
    ensembler.tilt(-1.0, 50)
    ensembler.reset()  # an unfinished tilt ends with the episode
    assert ensembler.m == 0.1
    with pytest.raises(ValueError, match="m=nan"):
        ensembler.tilt(float("nan"), 5)
    with pytest.raises(ValueError, match="ticks=-1"):
        ensembler.tilt(0.0, -1)


def test_ensembler_with_latency_uses_the_chunk_from_its_start_tick():
    ensembler = TemporalEnsembler(0.1, K, A)
    (chunk,) = _chunks(1)
    assert ensembler.action(3) is None
    ensembler.add_chunk(0, chunk)  # computed at tick 0, usable at tick 3: the past is skipped
    np.testing.assert_array_equal(ensembler.action(3), chunk[3])
    assert ensembler.action(K) is None  # beyond the chunk: nothing to ensemble
    ensembler.reset()
    assert ensembler.action(3) is None


def test_queue_executes_newest_chunk_and_holds_its_end():
    queue = ChunkQueue(K, A)
    first, second = _chunks(2)
    queue.add_chunk(0, first)
    np.testing.assert_array_equal(queue.action(2), first[2])
    queue.add_chunk(4, second)
    np.testing.assert_array_equal(queue.action(4), second[0])
    np.testing.assert_array_equal(queue.action(4 + K + 3), second[-1])
    queue.add_chunk(1, first)  # an older chunk arriving late never replaces a newer one
    np.testing.assert_array_equal(queue.action(5), second[1])


@pytest.mark.parametrize("executor", ["ensemble", "queue"])
def test_executors_reject_bad_chunks(executor):
    ex = make_executor(executor, PolicyConfig(chunk_size=K, action_dim=A, width=16, heads=2), 0.1)
    with pytest.raises(ValueError, match="shape"):
        ex.add_chunk(0, np.zeros((K - 1, A)))
    with pytest.raises(ValueError, match="non-finite"):
        ex.add_chunk(0, np.full((K, A), np.nan))
    with pytest.raises(ValueError):
        make_executor("fifo", PolicyConfig(), 0.1)


def _tiny_runtime(execution="ensemble"):
    torch.manual_seed(0)
    config = PolicyConfig(image_size=32, patch_size=16, width=32, heads=4, encoder_layers=1, chunk_size=K,
                          dropout=0.0)
    normalizer = Normalizer(np.zeros(9), np.ones(9), np.arange(8.0), np.full(8, 2.0))
    return PolicyRuntime(ACTPolicy(config), normalizer, execution=execution, m=0.1)


def test_runtime_predicts_unnormalised_chunks_and_attention():
    runtime = _tiny_runtime()
    images = {c: np.full((32, 32, 3), 100, np.uint8) for c in ("front", "wrist")}
    before = {c: v.copy() for c, v in images.items()}
    pred = runtime.predict_chunk(images, np.zeros(9), "put the red block in the box", need_attention=True)
    assert pred.actions.shape == (K, 8) and np.all(np.isfinite(pred.actions))
    with torch.no_grad():
        pixels, state = runtime.preprocess(images, np.zeros(9))
        ids, mask = runtime.tokenizer.encode_batch(["put the red block in the box"])
        raw = runtime.model(pixels, state, ids, mask).actions[0].double().numpy()
    np.testing.assert_allclose(pred.actions, raw * 2.0 + np.arange(8.0), rtol=1e-5, atol=1e-5)
    assert set(pred.attention) == {"front", "wrist"} and pred.attention["front"].shape == (2, 2)
    for c in images:
        np.testing.assert_array_equal(images[c], before[c])  # inputs not mutated
    runtime.add_chunk(0, pred.actions)
    arm, gripper = runtime.action(0)
    np.testing.assert_allclose(arm, pred.actions[0, :7])
    assert gripper == (0.04 if pred.actions[0, 7] > 0.02 else 0.0)  # binary, the default
    runtime.gripper = "continuous"
    arm, gripper = runtime.action(0)
    np.testing.assert_allclose(np.append(arm, gripper), pred.actions[0])


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1.0, max_value=1.0))
def test_binary_gripper_is_open_or_closed_at_the_middle_of_the_range(opening):
    low, high = GRIPPER_RANGE
    snapped = gripper_command(opening, "binary")
    assert snapped == (high if opening > 0.5 * (low + high) else low)
    assert gripper_command(opening, "continuous") == opening


def test_binary_gripper_follows_the_weighted_majority_of_disagreeing_chunks():
    """After a grasp that closed on nothing, older chunks still say closed and newer ones open:
    their ensemble is a half-open opening, which the binary command turns into a decision."""
    runtime = _tiny_runtime()
    closed, opened = np.zeros((K, 8)), np.zeros((K, 8))
    opened[:, 7] = 0.04
    runtime.add_chunk(0, closed)
    runtime.add_chunk(0, opened)
    runtime.gripper = "continuous"
    half = runtime.action(0)[1]
    assert 0.0 < half < 0.04
    runtime.gripper = "binary"
    assert runtime.action(0)[1] == (0.04 if half > 0.02 else 0.0)
    with pytest.raises(ValueError, match="gripper='half' must be one of"):
        PolicyRuntime(runtime.model, runtime.normalizer, gripper="half")


@pytest.mark.parametrize(
    "images, position, reason",
    [
        ({"front": np.zeros((32, 32, 3), np.uint8)}, np.zeros(9), "missing camera"),
        ({c: np.zeros((16, 32, 3), np.uint8) for c in ("front", "wrist")}, np.zeros(9), "expected"),
        ({c: np.zeros((32, 32, 3), np.uint8) for c in ("front", "wrist")}, np.full(9, np.nan), "finite"),
    ],
)
def test_runtime_rejects_bad_observations(images, position, reason):
    with pytest.raises(ValueError, match=reason):
        _tiny_runtime().predict_chunk(images, position, "put the red block in the box")


def test_measured_latency_is_a_median_over_many_calls_and_rounds_up_to_ticks():
    from arm_act.policy.runtime import measure_latency_ticks

    runtime = _tiny_runtime()
    ticks, median, times = measure_latency_ticks(runtime, 50.0, calls=12, warmup=1)
    assert len(times) == 12 and median == pytest.approx(float(np.median(times)))
    assert ticks == max(1, int(np.ceil(median * 50.0)))


@pytest.mark.parametrize("ticks, times_ms, load, says", [
    (1, [4.0] * 20, 0.5, None),
    (6, [117.8] * 20, 0.5, "6 control ticks"),
    (1, [4.0] * 20, 1.6, "load average 1.60 per CPU"),
    (1, [2.0] * 10 + [9.0] * 10, 0.2, "calls from 2.0 to 9.0 ms"),
])
def test_a_latency_that_may_not_describe_the_machine_is_named(ticks, times_ms, load, says):
    from arm_act.policy.runtime import latency_warning

    warning = latency_warning(ticks, [t / 1e3 for t in times_ms], load)
    if says is None:
        assert warning is None
    else:
        assert says in warning and "--latency-ticks" in warning
