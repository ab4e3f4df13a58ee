"""sim_node's realtime schedule without ROS: StepGrid (where the control and camera ticks fall,
which step runs ahead, how long a hold lasts) and WallClockPacer (the wait for the wall clock
on one reference, late publications, overruns, a loop far behind)."""
from __future__ import annotations

import threading
import time

import pytest

from arm_act.nodes.loop_timing import LoopTiming
from arm_act.nodes.sim_pacing import MAX_LAG_S, OVERRUN_PERIODS, LoopPlace, StepGrid, WallClockPacer

pytestmark = pytest.mark.unit

PLACE = LoopPlace(counted=True, episode=3, episode_start=100.0, tick_sent_at=0.0, answered_at=0.0)


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Logger:
    def __init__(self):
        self.warnings: list[tuple[str, dict]] = []

    def warning(self, text, **kwargs):
        self.warnings.append((text, kwargs))


def _pacer(rate: int = 50, factor: float = 1.0, clock=None, stopped: bool = True):
    """A pacer on a fake clock; `stopped`: its waits return at once (the stop event is set)."""
    stop = threading.Event()
    if stopped:
        stop.set()
    logger = Logger()
    pacer = WallClockPacer(factor, rate, LoopTiming(), threading.Condition(), stop, logger,
                           clock=clock or FakeClock())
    return pacer, logger


# ------------------------------------------------------------ StepGrid
@pytest.mark.parametrize("per_command, per_frame, ahead", [(2, 10, [9, 19, 29]), (2, 2, [1, 3, 5, 7]),
                                                           (1, 5, [])])
def test_the_step_before_a_camera_tick_that_is_a_control_tick_runs_ahead(per_command, per_frame, ahead):
    grid = StepGrid(per_command, per_frame)
    assert [s for s in range(30) if grid.runs_ahead(s)][:len(ahead) or None] == ahead
    # A step that is itself a control tick never runs ahead (nothing between ticks to defer).
    assert not any(grid.runs_ahead(s) for s in range(30) if grid.control_tick(s))


def test_ticks_fall_on_multiples_of_their_steps():
    grid = StepGrid(2, 10)
    assert [s for s in range(21) if grid.control_tick(s)] == list(range(0, 21, 2))
    assert [s for s in range(21) if grid.camera_tick(s)] == [0, 10, 20]


@pytest.mark.parametrize("seconds, ended_at, steps", [(1.0, 0, 100), (1.0, 51, 101), (1.0, 50, 100),
                                                      (0.0, 7, 1), (0.0, 0, 0), (-1.0, 3, 0)])
def test_a_hold_ends_on_the_control_period_grid(seconds, ended_at, steps):
    grid = StepGrid(2, 10)
    assert grid.hold_steps(seconds, 100, ended_at) == steps
    assert (ended_at + steps) % 2 == 0 or steps == 0


@pytest.mark.parametrize("per_command, per_frame", [(0, 10), (2, -1), (2.0, 10), (True, 10), (2, None)])
def test_a_grid_of_no_whole_steps_is_refused(per_command, per_frame):
    with pytest.raises(ValueError, match="whole number of steps"):
        StepGrid(per_command, per_frame)


def test_a_hold_of_no_number_is_refused():
    with pytest.raises(ValueError):
        StepGrid(2, 10).hold_steps(float("nan"), 100)


# ------------------------------------------------------------ WallClockPacer
@pytest.mark.parametrize("factor, rate", [(0.0, 50), (-1.0, 50), (float("nan"), 50), (1.0, 0)])
def test_a_pacer_needs_a_positive_factor_and_rate(factor, rate):
    with pytest.raises(ValueError):
        _pacer(rate=rate, factor=factor)


def test_the_first_call_sets_the_reference_and_later_ones_count_from_it():
    clock = FakeClock()
    pacer, _ = _pacer(clock=clock)
    assert pacer.pace(5.0, PLACE) == 0.0 and pacer.ref == (1000.0, 5.0)
    clock.now += 0.004
    assert pacer.pace(5.01, PLACE) == pytest.approx(0.006)  # 10 ms of sim time after 4 ms of wall time
    assert pacer.pace(5.01, PLACE, lead=0.002) == pytest.approx(0.004)  # the stamp 2 ms before sim_time
    assert pacer.pace(5.01, PLACE, run_ahead=0.005) == pytest.approx(0.001)
    assert pacer.ref == (1000.0, 5.0) and pacer.timing.late_max_ms == 0.0


def test_the_real_time_factor_scales_the_wall_time():
    clock = FakeClock()
    pacer, _ = _pacer(clock=clock, factor=2.0)
    pacer.pace(0.0, PLACE)
    assert pacer.pace(1.0, PLACE) == pytest.approx(0.5)


def test_a_late_publication_is_recorded_and_a_slight_one_keeps_the_reference():
    clock = FakeClock()
    pacer, logger = _pacer(clock=clock)
    pacer.pace(0.0, PLACE)
    clock.now += 0.02 + 0.008  # 8 ms late for the 20 ms stamp: under half a 20 ms period
    ahead = pacer.pace(0.02, PLACE, what="control tick")
    assert ahead == pytest.approx(-0.008)
    assert pacer.ref == (1000.0, 0.0) and pacer.timing.overruns == 0 and not logger.warnings
    assert pacer.timing.late_max_ms == pytest.approx(8.0)
    (event,) = pacer.timing.events
    assert event["what"] == "control tick" and event["episode"] == 3 and event["sim_s"] == pytest.approx(-99.98)


def test_within_run_ahead_of_its_stamp_a_publication_is_not_late():
    clock = FakeClock()
    pacer, _ = _pacer(clock=clock)
    pacer.pace(0.0, PLACE)
    clock.now += 0.02 - 0.001
    pacer.pace(0.02, PLACE, run_ahead=0.005, what="hold")  # 4 ms further ahead than the hold may run
    assert pacer.timing.late_max_ms == 0.0


def test_an_overrun_moves_the_reference_to_the_late_stamp_and_warns():
    clock = FakeClock()
    pacer, logger = _pacer(clock=clock, rate=50)
    pacer.pace(0.0, PLACE)
    late = OVERRUN_PERIODS / 50 + 0.005  # past half a control period
    clock.now += 0.1 + late
    assert pacer.pace(0.1, PLACE, lead=0.0, what="joint state") == 0.0
    assert pacer.ref == (clock.now, 0.1)
    assert pacer.timing.overruns == 1 and pacer.timing.skipped_ms == pytest.approx(late * 1e3)
    ((text, kwargs),) = logger.warnings
    assert text.startswith("overrun: joint state at -99.90 s of episode 3") and kwargs["throttle_duration_sec"] > 0
    # The next publication counts from the late one: on time, not in a burst.
    clock.now += 0.002
    assert pacer.pace(0.11, PLACE) == pytest.approx(0.008)


def test_an_overrun_before_the_first_episode_moves_the_reference_without_a_record():
    clock = FakeClock()
    pacer, logger = _pacer(clock=clock)
    pacer.pace(0.0, PLACE)
    clock.now += 0.2
    pacer.pace(0.05, PLACE._replace(counted=False))
    assert pacer.ref == (clock.now, 0.05)
    assert pacer.timing.overruns == 0 and pacer.timing.late_max_ms == 0.0 and not logger.warnings


def test_far_behind_without_an_overrun_the_reference_moves_to_now():
    # An overrun takes precedence, so only a hold that may run ahead gets this far behind its
    # wait without an overrun: run_ahead larger than MAX_LAG_S.
    clock = FakeClock()
    pacer, _ = _pacer(clock=clock)
    pacer.pace(0.0, PLACE)
    clock.now += 0.01
    ahead = pacer.pace(0.01, PLACE, run_ahead=MAX_LAG_S + 0.1)
    assert ahead < -MAX_LAG_S and pacer.ref == (clock.now, 0.01)


def test_the_pacer_waits_on_the_wall_clock():
    pacer, _ = _pacer(stopped=False, clock=time.monotonic)
    pacer.pace(0.0, PLACE)
    started = time.monotonic()
    pacer.pace(0.05, PLACE)
    assert time.monotonic() - started >= 0.045


def test_a_wait_with_until_ends_when_it_comes_true_and_on_stop():
    pacer, _ = _pacer(stopped=False, clock=time.monotonic)
    answered = []

    def answer():
        time.sleep(0.05)
        with pacer.lock:
            answered.append(True)
            pacer.lock.notify_all()

    pacer.pace(0.0, PLACE)
    thread = threading.Thread(target=answer)
    started = time.monotonic()
    thread.start()
    pacer.pace(5.0, PLACE, until=lambda: bool(answered))
    thread.join()
    assert 0.04 <= time.monotonic() - started < 2.0
    threading.Timer(0.05, pacer.stop.set).start()
    started = time.monotonic()
    pacer.pace(10.0, PLACE)
    assert time.monotonic() - started < 2.0
