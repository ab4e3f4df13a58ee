"""sim_node's realtime schedule without ROS: which steps of an episode are control and camera
ticks (StepGrid), and the wait until the wall clock reaches each publication's time
(WallClockPacer).

The pacer keeps one (wall s, sim s) reference for the whole run, across episodes and resets,
so the time a reset takes is made up in the hold before it rather than lost: the real-time
factor stays 1 across episodes. How late the loop reached each publication, and why, goes to
arm_act.nodes.loop_timing.LoopTiming.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from arm_act.nodes.loop_timing import LoopTiming

# A loop further behind the wall clock than this (paused, or stalled) continues from now
# instead of racing to catch up.
MAX_LAG_S = 0.25
# A publication reached more than this share of a control period after its stamp's time is
# an overrun: the loop continues on a new reference from it, skipping the wall time lost, as
# ros2_control_node skips the cycles an overrun missed. Catching up instead would publish the
# next ticks in a burst, sooner after the late one than the controllers answer a tick, so a
# control period would go without a command and the next get two.
OVERRUN_PERIODS = 0.5
# Seconds between two overrun warnings in the log.
OVERRUN_WARN_EVERY_S = 10.0


@dataclasses.dataclass(frozen=True)
class StepGrid:
    """An episode's env steps (of one step period each) and where its ticks fall: a control
    tick every `steps_per_command` steps, a camera tick every `steps_per_frame`; step 0 is both."""

    steps_per_command: int
    steps_per_frame: int

    def __post_init__(self):
        for name in ("steps_per_command", "steps_per_frame"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a whole number of steps, at least 1")

    def control_tick(self, step: int) -> bool:
        return step % self.steps_per_command == 0

    def camera_tick(self, step: int) -> bool:
        return step % self.steps_per_frame == 0

    def runs_ahead(self, step: int) -> bool:
        """Is `step` the joint-state step just before a camera tick (that is a control tick
        too)? In realtime its physics step and the camera tick's render then run as soon as
        the controllers' commands for the tick before have arrived (or at the step's time at
        the latest), and the step's joint state goes out at its time from a copy. The world of
        the camera tick depends on nothing newer (the next commands answer the camera tick
        itself), so the physics is the same; the render gets the time the commands take plus
        the step, instead of only the slack of the step before its tick."""
        nxt = step + 1
        return not self.control_tick(step) and self.control_tick(nxt) and self.camera_tick(nxt)

    def hold_steps(self, seconds: float, step_rate: int, ended_at_step: int = 0) -> int:
        """Steps of a hold of `seconds` after an episode that ended after `ended_at_step`
        steps, rounded up so that the hold ends on the control-period grid; none for a hold
        of 0 s or less. ValueError for a hold that is not a number."""
        steps = int(round(seconds * step_rate))
        return max(0, steps + -(ended_at_step + steps) % self.steps_per_command)


class LoopPlace(NamedTuple):
    """Where the loop is when it waits, for the record of a late publication: `counted`
    (in an episode, not before the first), the episode and its start (sim s), and the
    monotonic times the last control tick went out and its arm command came in."""

    counted: bool
    episode: int
    episode_start: float
    tick_sent_at: float
    answered_at: float


class WallClockPacer:
    """Waits until the wall clock reaches a publication's stamp, on one reference kept across
    episodes: further behind than MAX_LAG_S, the reference moves to now; more than
    OVERRUN_PERIODS of a control period late, the loop continues from this publication
    (LoopTiming counts the overrun, and a warning says so). `lock` is the condition the
    command callbacks notify, `stop` ends any wait at once."""

    def __init__(self, real_time_factor: float, control_rate: int, timing: LoopTiming, lock: threading.Condition,
                 stop: threading.Event, logger, clock: Callable[[], float] = time.monotonic):
        if not real_time_factor > 0:
            raise ValueError(f"real_time_factor={real_time_factor!r}: a paced loop needs a factor above 0")
        if not control_rate > 0:
            raise ValueError(f"control_rate={control_rate!r} must be above 0")
        self.real_time_factor = float(real_time_factor)
        self.control_rate = control_rate
        self.timing = timing
        self.lock = lock
        self.stop = stop
        self.logger = logger
        self.clock = clock
        self.ref: tuple[float, float] | None = None  # (wall s, sim s) the schedule is counted from
        # Wall s the last env.reset (and episode-start render) took: the hold before a reset runs
        # that far ahead of its stamps.
        self.reset_wall_s = 0.0

    def pace(self, sim_time: float, place: LoopPlace, lead: float = 0.0, until: Callable[[], bool] | None = None,
             what: str = "tick", run_ahead: float = 0.0) -> float:
        """Wait until the wall clock reaches `sim_time` less `lead` s (the stamp of the
        publication `what` that comes next), or (with `until`, called with the lock held)
        until `until()` comes true before then. `run_ahead`: the wait ends that many seconds
        early, and a publication reached within run_ahead of its stamp is not late. The first
        call sets the reference. Returns the seconds the loop was ahead of its schedule."""
        now = self.clock()
        if self.ref is None:
            self.ref = (now, sim_time)
            return 0.0
        wall0, sim0 = self.ref
        ahead = (sim_time - sim0) / self.real_time_factor - (now - wall0) - lead - run_ahead
        late_s = -(ahead + run_ahead)
        if late_s > 0 and place.counted:  # reached this publication after its stamp's time
            self.timing.late(now, late_s * 1e3, place.episode, sim_time - lead - place.episode_start, what,
                             tick_sent_at=place.tick_sent_at, answered_at=place.answered_at)
        if late_s > OVERRUN_PERIODS / self.control_rate:
            self.ref = (now, sim_time - lead)  # this publication's stamp is now
            ahead = -run_ahead
            if place.counted:
                self._overrun(late_s, sim_time - lead, place, what)
        if ahead > 0 and until is not None:
            deadline = now + ahead
            with self.lock:
                while not until() and not self.stop.is_set():
                    remaining = deadline - self.clock()
                    if remaining <= 0:
                        break
                    self.lock.wait(remaining)
        elif ahead > 0:
            self.stop.wait(ahead)
        elif ahead < -MAX_LAG_S:
            self.ref = (now, sim_time)
        self.timing.woke(self.clock(), now + ahead if ahead > 0 else None, place.counted)
        return ahead

    def _overrun(self, late_s: float, stamp: float, place: LoopPlace, what: str) -> None:
        self.timing.overrun(late_s * 1e3)
        self.logger.warning(
            f"overrun: {what} at {stamp - place.episode_start:.2f} s of episode "
            f"{place.episode} reached {late_s * 1e3:.1f} ms after its time; the loop continues "
            f"from it ({self.timing.overruns} overruns, {self.timing.skipped_ms:.0f} ms "
            f"skipped)", throttle_duration_sec=OVERRUN_WARN_EVERY_S)
