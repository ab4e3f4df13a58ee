"""sim_node's command input without ROS: the newest valid targets and their counts as the
executor thread delivers them (CommandInbox), and the realtime account of command delivery
per control period (CommandPeriods).

The executor thread (the command callbacks and the pause, unpause and reset services) and
the sim_loop thread share one condition, CommandInbox.lock: every change notifies it, so the
loop's waits for a command (lockstep, or the step before a camera tick) end as soon as one
arrives.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

# Lockstep: seconds between two checks of the command counts while waiting for a tick's command,
# and how many checks pass between two re-sends of the first tick's observation.
LOCKSTEP_POLL_S = 0.05
RESEND_EVERY_POLLS = 20
# Seconds between two checks of the pause flag while paused.
PAUSE_POLL_S = 0.1


class CommandInbox:
    """The newest arm and gripper targets, how many of each arrived since the node started,
    the pause and reset requests; and the target last applied to the world (the loop's own,
    so that an unchanged command is not applied again)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.lock = threading.Condition()
        self.clock = clock
        self.arm: np.ndarray | None = None
        self.gripper: float | None = None
        self.arm_count = 0
        self.gripper_count = 0
        self.arm_received_at = 0.0  # monotonic s of the newest arm command
        self.tick_counts = (0, 0)  # (arm, gripper) counts when the last control tick went out
        self.ticks_published = 0  # lockstep: control ticks that each ask for one command
        self.paused = False
        self.reset_requested = False
        self._held = np.zeros(8)  # the episode's reset pose (7 arm joints, gripper)
        self._applied: tuple[np.ndarray | None, float | None] = (None, None)

    # ------------------------------------------------------------ the executor thread
    def put_arm(self, arm: np.ndarray) -> None:
        with self.lock:
            self.arm = arm
            self.arm_count += 1
            self.arm_received_at = self.clock()
            self.lock.notify_all()

    def put_gripper(self, opening: float) -> None:
        with self.lock:
            self.gripper = float(opening)
            self.gripper_count += 1
            self.lock.notify_all()

    def request_reset(self) -> None:
        with self.lock:
            self.reset_requested = True
            self.lock.notify_all()

    def service(self, name: str) -> str:
        """sim_node's Trigger services (~/reset, ~/pause, ~/unpause): do what `name` asks and
        return the service's answer."""
        if name == "reset":
            self.request_reset()
            return "next episode starts"
        if name not in ("pause", "unpause"):
            raise ValueError(f"no service {name!r}: reset, pause or unpause")
        self.pause(name == "pause")
        return "paused" if name == "pause" else "running"

    def pause(self, paused: bool) -> None:
        with self.lock:
            self.paused = paused
            if not paused:
                self.lock.notify_all()

    # ------------------------------------------------------------ the sim_loop thread
    def start_episode(self, reset_pose) -> None:
        """A new episode: forget the targets and a reset request; until the first command, the
        missing part of a target is held at `reset_pose` (7 arm joints, then the gripper)."""
        pose = np.asarray(reset_pose, dtype=float)
        if pose.shape[0] < 8:
            raise ValueError(f"a reset pose of {pose.shape[0]} values: needs 7 arm joints and the gripper")
        self._held = np.concatenate([pose[:7], pose[7:8]])
        self._applied = (None, None)
        with self.lock:
            self.arm = None
            self.gripper = None
            self.reset_requested = False

    def mark_tick(self) -> None:
        """A control tick goes out now: the commands that answer it are the ones after these."""
        with self.lock:
            self.tick_counts = (self.arm_count, self.gripper_count)

    def tick_answered(self) -> bool:
        """(Lock held.) Have an arm and a gripper command arrived since the last control tick?"""
        arm0, gripper0 = self.tick_counts
        return self.arm_count > arm0 and self.gripper_count > gripper0

    def arm_count_and_paused(self) -> tuple[int, bool]:
        with self.lock:
            return self.arm_count, self.paused

    def target_to_apply(self) -> tuple[np.ndarray, float] | None:
        """The newest (arm, gripper) target, a missing part held at the reset pose; None when
        nothing arrived this episode (the world holds its reset pose) or the target is the one
        last returned."""
        with self.lock:
            arm, gripper = self.arm, self.gripper
        if arm is None and gripper is None:
            return None
        arm = self._held[:7] if arm is None else arm
        gripper = float(self._held[7]) if gripper is None else gripper
        applied_arm, applied_gripper = self._applied
        if arm is applied_arm and gripper == applied_gripper:
            return None
        self._applied = (arm, gripper)
        return arm, gripper

    def wait_for_tick(self, stop: threading.Event, lockstep: bool, timeout: float, logger, sim_time: float,
                      resend: Callable[[], None]) -> bool:
        """Hold while paused; in lockstep, block until the command for this tick arrived (one
        arm and one gripper command per control tick, counted since the node started), warning
        every `timeout` s. Before the first arm command, resend() (called without the lock)
        re-sends the tick's observation now and then, so a controller that starts late still
        receives it. Returns False on stop."""
        with self.lock:
            while self.paused and not stop.is_set():
                self.lock.wait(PAUSE_POLL_S)
            if not lockstep:
                return not stop.is_set()
            self.ticks_published += 1
            waited = 0.0
            while not stop.is_set() and (
                self.arm_count < self.ticks_published or self.gripper_count < self.ticks_published
            ):
                self.lock.wait(LOCKSTEP_POLL_S)
                waited += LOCKSTEP_POLL_S
                if waited >= timeout:
                    logger.warning(
                        f"lockstep: no command for t={sim_time:.3f} after {waited:.0f} s "
                        f"(arm {self.arm_count}, gripper {self.gripper_count} of "
                        f"{self.ticks_published} ticks); still waiting"
                    )
                    waited = 0.0
                if self.arm_count == 0 and waited and round(waited / LOCKSTEP_POLL_S) % RESEND_EVERY_POLLS == 0:
                    self.lock.release()
                    try:
                        resend()
                    finally:
                        self.lock.acquire()
            return not stop.is_set()


class CommandPeriods:
    """Realtime ground truth of command delivery, per control period (from one tick's
    observation to the next): periods in which no arm command arrived (the arm tracks the
    previous target for the whole period, as a ros2_control hardware interface would see a
    missed command) and commands beyond the first in one period."""

    def __init__(self):
        self.control_periods = 0
        self.periods_without_command = 0
        self.extra_commands = 0
        self._period_start: int | None = None  # the arm count when the current period began
        self._episode_start = 0  # the arm count at the episode's first tick

    def count(self, step: int, arm_count: int, paused: bool, realtime: bool) -> None:
        """At each control tick `step` of an episode, before its observation goes out: count
        the `arm_count` commands (since the node started) that arrived in the period ending
        now. Counting starts at the first tick after the episode's first command (a realtime
        policy sends nothing before its first chunk, by design: the arm holds its reset pose);
        a paused period, and lockstep, are not counted."""
        if step < 0 or arm_count < 0:
            raise ValueError(f"step {step}, arm count {arm_count}: neither can be negative")
        if step == 0:
            self._episode_start, self._period_start = arm_count, None
            return
        if not realtime or paused:
            self._period_start = None if self._period_start is None else arm_count
            return
        if self._period_start is None:
            if arm_count > self._episode_start:
                self._period_start = arm_count
            return
        new = arm_count - self._period_start
        if new < 0:
            raise ValueError(f"arm count {arm_count} below the {self._period_start} of the period's start")
        self.control_periods += 1
        if new == 0:
            self.periods_without_command += 1
        elif new > 1:
            self.extra_commands += new - 1
        self._period_start = arm_count
