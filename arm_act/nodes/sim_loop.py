"""sim_node's episode loop without ROS: the physics steps, the commands applied between them,
the renders and the waits for the wall clock, in the order the ticks need them; every
publication goes through an EpisodeOutput (sim_node's publishers).

Per control tick: the observation goes out, (lockstep) the loop waits for the tick's command,
the newest valid command is applied, the world steps; in realtime the steps between control
ticks publish joint states and apply a command that came in meanwhile from the next step on,
as a position controller tracks its newest setpoint. Sim time is continuous across episodes.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from arm_act.nodes.loop_timing import LoopTiming
from arm_act.nodes.sim_commands import CommandInbox, CommandPeriods
from arm_act.nodes.sim_pacing import LoopPlace, StepGrid, WallClockPacer


class EpisodeOutput(Protocol):
    """What the loop publishes, stamped with the loop's sim_time at the call."""

    def observation(self, step: int, resend: bool = False) -> None:
        """A control tick: /clock, the images (camera ticks: SimLoop.camera_images), objects
        and the joint state."""

    def joint_state(self, clock: bool = True) -> None:
        """/clock (unless `clock` is False) and the joint state."""

    def joint_state_later(self) -> object:
        """The joint state (and /clock) of now, built to be published later by publish_later."""

    def publish_later(self, made: object) -> None:
        """Publish what joint_state_later built."""

    def episode_ended(self, state: str) -> None:
        """The episode ended in `state` ("success", "failure", ...) at the loop's sim_time."""


class SimLoop:
    """The episodes of one run, stepped in the sim_loop thread. `mode` "realtime" or
    "lockstep"; realtime with `real_time_factor` above 0 is paced to the wall clock (paced),
    with 0 runs as fast as it can. `counted()`: record loop timing now (the node is running).
    `before_tick()`, if given, runs at each control tick before its observation goes out
    (sim_node applies new instructions there)."""

    def __init__(self, env, grid: StepGrid, out: EpisodeOutput, *, mode: str, real_time_factor: float,
                 control_rate: int, step_rate: int, reset_pause: float, lockstep_timeout: float,
                 commands: CommandInbox, periods: CommandPeriods, timing: LoopTiming, stop: threading.Event,
                 logger, counted: Callable[[], bool], start_time: float,
                 before_tick: Callable[[], None] | None = None):
        if mode not in ("realtime", "lockstep"):
            raise ValueError(f"mode={mode!r} must be 'realtime' or 'lockstep'")
        if step_rate % control_rate or step_rate // control_rate != grid.steps_per_command:
            raise ValueError(f"step_rate={step_rate} is not {grid.steps_per_command} steps per control period "
                             f"at control_rate={control_rate}")
        self.env, self.grid, self.out = env, grid, out
        self.mode, self.real_time_factor = mode, real_time_factor
        self.control_rate, self.step_rate = control_rate, step_rate
        self.reset_pause, self.lockstep_timeout = reset_pause, lockstep_timeout
        self.commands, self.periods, self.timing = commands, periods, timing
        self.stop, self.logger, self.counted = stop, logger, counted
        self.before_tick = before_tick
        self.pacer = (WallClockPacer(real_time_factor, control_rate, timing, commands.lock, stop, logger)
                      if real_time_factor > 0 else None)
        self.sim_time = start_time
        self.episode_index = -1
        self.episode_start = start_time
        self.tick_sent_at = 0.0  # monotonic s the last control tick went out
        # The wall time the last env.reset took (the hold before a reset runs that far ahead).
        self.reset_wall_s = 0.0
        self.last_images: dict | None = None
        # Images of the next camera tick, rendered before the realtime wait for that tick so
        # its observation (and /clock) goes out on time instead of a render later.
        self.prerendered: tuple[int, dict] | None = None

    @property
    def paced(self) -> bool:
        """Realtime on the wall clock (not lockstep, not as fast as rendering allows)."""
        return self.mode == "realtime" and self.real_time_factor > 0

    def runs_ahead(self, step: int) -> bool:
        """Paced: is `step` the joint-state step just before a camera tick, whose physics step
        and render run ahead of its time (StepGrid.runs_ahead)?"""
        return self.paced and self.grid.runs_ahead(step)

    def start_episode(self, seed: int, n_blocks: int) -> None:
        """Reset the world for the next episode, which starts at the current sim_time."""
        self.episode_index += 1
        started = time.monotonic()
        self.env.reset(seed=seed, n_blocks=n_blocks)
        self.reset_wall_s = time.monotonic() - started
        self.episode_start = self.sim_time
        self.commands.start_episode(self.env.joint_state().position)

    def run_episode(self) -> None:
        """One episode, until the world's status is no longer "running", a reset is requested
        or `stop` is set."""
        step = 0
        self.prerendered = None
        deferred = None  # a joint state built ahead of its time (runs_ahead), not yet published
        if self.paced:
            # The first tick is a camera tick too: render it before its time, not in its
            # publication (which would go out a render late, and the episode's first command
            # with it); the next hold makes the render time up along with the reset's.
            started = time.monotonic()
            self.prerendered = (0, self.render(start=True))
            self.reset_wall_s += time.monotonic() - started
            self.pace(what="episode start")
        while not self.stop.is_set():
            if self.grid.control_tick(step):
                if not self._control_tick(step):
                    return
            else:
                deferred = self._between_ticks(step)
            self.step()
            step += 1
            self.sim_time = self.episode_start + step / self.step_rate
            status = self.env.status()
            if status != "running" or self.commands.reset_requested:
                if deferred is not None:
                    deferred = self._publish_deferred(deferred)
                self._end_episode(status if status != "running" else "failure", step)
                return
            if self.paced:
                deferred = self._pace_step(step, deferred)

    def camera_images(self, step: int, resend: bool = False) -> dict | None:
        """The images of control tick `step` when it is a camera tick (None otherwise): the
        ones rendered ahead for it, else rendered now; a re-sent tick's images again."""
        if not self.grid.camera_tick(step):
            return None
        if self.prerendered is not None and self.prerendered[0] == step and not resend:
            self.last_images = self.prerendered[1]
        elif not resend or self.last_images is None:
            self.last_images = self.render()
        self.prerendered = None
        return self.last_images

    def step(self) -> None:
        self.timing.timed("step", self.env.step, counted=self.counted())

    def render(self, start: bool = False):
        """Both cameras' images; `start`: the episode's first (part of its reset)."""
        return self.timing.timed("render", self.env.render, counted=self.counted(), start=start)

    def pace(self, lead: float = 0.0, until=None, what: str = "tick", run_ahead: float = 0.0) -> None:
        """Paced: wait for the time of the publication `what` that comes next, at sim_time
        less `lead` s (WallClockPacer.pace); otherwise return at once."""
        if not self.paced:
            return
        place = LoopPlace(self.counted(), self.episode_index, self.episode_start, self.tick_sent_at,
                          self.commands.arm_received_at)
        self.pacer.pace(self.sim_time, place, lead=lead, until=until, what=what, run_ahead=run_ahead)

    def _control_tick(self, step: int) -> bool:
        """Count the command period that ends, publish the tick's observation, wait for its
        command (lockstep) and apply the newest. False on stop."""
        if self.before_tick is not None:
            self.before_tick()
        arm_count, paused = self.commands.arm_count_and_paused()
        self.periods.count(step, arm_count, paused, realtime=self.mode == "realtime")
        self.commands.mark_tick()
        self.tick_sent_at = time.monotonic()
        self.out.observation(step)
        if not self.commands.wait_for_tick(self.stop, self.mode == "lockstep", self.lockstep_timeout, self.logger,
                                           self.sim_time, resend=lambda: self.out.observation(0, resend=True)):
            return False
        self._apply_latest_command()
        return True

    def _between_ticks(self, step: int):
        """A joint-state step between control ticks: publish its joint state, or (runs_ahead)
        return it built, to go out at its time after the camera tick's physics step and render.
        A command that came after its tick's observation went out (they all do: the controller
        answers that observation) acts from the next step, instead of a whole control period
        late. (Lockstep has no steps between control ticks.)"""
        deferred = None
        if self.runs_ahead(step):
            deferred = (self.sim_time, self.out.joint_state_later())
        else:
            self.out.joint_state()
        self._apply_latest_command()
        return deferred

    def _pace_step(self, step: int, deferred):
        """Paced, after `step`: render the next camera tick inside the slack, publish a deferred
        joint state at its time, and wait for the next publication. Returns None (nothing
        deferred any more)."""
        if self.grid.camera_tick(step) and self.grid.control_tick(step):
            # The world does not change until the next env.step(), so this is the picture the
            # tick would render; rendering it inside the slack keeps the tick's publication on
            # the wall-clock schedule (docs/architecture.md, "Threading").
            self.prerendered = (step, self.render())
        if deferred is not None:
            deferred = self._publish_deferred(deferred)
        if self.runs_ahead(step):
            self.pace(until=self.commands.tick_answered, what="joint state ahead of a camera tick")
        else:
            self.pace(what="control tick" if self.grid.control_tick(step) else "joint state")
        return deferred

    def _publish_deferred(self, deferred) -> None:
        """Publish a joint state built ahead once the wall clock reaches its stamp; returns
        None (no longer deferred)."""
        stamp, made = deferred
        self.pace(lead=self.sim_time - stamp, what="joint state made ahead")
        self.out.publish_later(made)
        return None

    def _end_episode(self, state: str, step: int) -> None:
        if self.mode == "realtime":
            # (In lockstep every published control tick asks for one command, so the final
            # state is not published as a tick.)
            self.out.joint_state()
        self.out.episode_ended(state)
        if self.mode == "realtime":
            # Status is checked every step, so an episode can end between two control ticks:
            # the hold ends on the control-period grid again, so the next episode starts on it.
            # The controllers tick where /clock crosses multiples of the control period; an
            # episode starting off the grid would get its commands up to a period late, each
            # clamped by the joint-speed limit on the double step.
            self._hold(self.reset_pause, ended_at_step=step)
        # The next episode starts one control period later on the same clock.
        self.sim_time += 1.0 / self.control_rate

    def _hold(self, seconds: float, ended_at_step: int = 0) -> None:
        """Realtime: keep the world running and publishing for `seconds` of sim time before
        the next episode, so viewers see how it ended; rounded up to end on the control-period
        grid of an episode that ended after `ended_at_step` steps."""
        for _ in range(self.grid.hold_steps(seconds, self.step_rate, ended_at_step)):
            if self.stop.is_set():
                return
            self.step()
            self.sim_time += 1.0 / self.step_rate
            self.out.joint_state()
            self.pace(run_ahead=min(self.reset_wall_s, seconds), what="hold")

    def _apply_latest_command(self) -> None:
        target = self.commands.target_to_apply()
        if target is not None:
            self.env.apply_command(*target)
