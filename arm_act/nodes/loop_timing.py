"""How sim_node's realtime loop keeps its schedule, measured by the loop itself
(LoopTiming), and how a controller answers the ticks it publishes (AnswerTiming, below).

The loop alternates work (physics steps, renders of both cameras, publications) with waits
until the wall clock reaches the next publication time (sim_pacing.WallClockPacer.pace). A
publication reached after its time is *late*; LoopTiming says by how much and why:

- the work since the loop last woke up (wall ms), and inside it the physics steps and renders
  in wall and thread-CPU ms: wall far above CPU means the thread was not running (another
  thread or process had the CPU, or the machine paused), CPU close to wall means the work itself
  was long;
- how late the previous wait woke up after its deadline (the scheduler, or a paused machine);
- how long ago the last control tick went out, and how long after it its arm command came
  (None: not yet), since the step before a camera tick waits for that command.

Each late publication over EVENT_MS is an event; the KEEP latest are kept, and the KEEP
latest over WORST_MS, each with what was published and its monotonic time so it can be
matched against other records of the same run, such as benchmarks/stall_watch.py's. The
episode-start render (part of a reset) is counted apart from the loop's own renders, and the
longest step and render are also kept in thread-CPU ms.
"""
from __future__ import annotations

import json
import time
from collections import deque

# A publication this late (ms) is kept as an event.
EVENT_MS = 5.0
# Events kept: the latest, and the latest over WORST_MS.
KEEP = 12
WORST_MS = 10.0


class LoopTiming:
    """sim_node's account of its loop: maxima, counts and the latest late publications."""

    def __init__(self, event_ms: float = EVENT_MS, keep: int = KEEP):
        self.event_ms = event_ms
        self.late_max_ms = 0.0
        self.late_over_10ms = 0
        self.late_events_total = 0
        self.overruns = 0
        self.skipped_ms = 0.0
        self.step_max_ms = 0.0
        self.render_max_ms = 0.0
        self.step_cpu_max_ms = 0.0
        self.render_cpu_max_ms = 0.0
        self.start_render_max_ms = 0.0
        self.wake_late_max_ms = 0.0
        self.events: deque[dict] = deque(maxlen=keep)
        self.worst: deque[dict] = deque(maxlen=keep)
        self._resumed_at: float | None = None
        self._wake_late_ms = 0.0
        self._work = {"step": [0.0, 0.0, 0], "render": [0.0, 0.0, 0]}  # wall ms, cpu ms, count since waking

    def timed(self, kind: str, fn, counted: bool = True, start: bool = False):
        """Run fn() and time it as `kind` ("step" or "render"); `counted` False (before the
        first episode) records nothing; `start`: an episode-start render (part of the reset)."""
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        result = fn()
        wall_ms = (time.perf_counter() - wall0) * 1e3
        cpu_ms = (time.thread_time() - cpu0) * 1e3
        if counted:
            if start:
                self.start_render_max_ms = max(self.start_render_max_ms, wall_ms)
            else:
                for key, ms in ((f"{kind}_max_ms", wall_ms), (f"{kind}_cpu_max_ms", cpu_ms)):
                    setattr(self, key, max(getattr(self, key), ms))
            work = self._work[kind]
            work[0] += wall_ms
            work[1] += cpu_ms
            work[2] += 1
        return result

    def woke(self, now: float, deadline: float | None = None, counted: bool = True) -> None:
        """The loop starts new work at `now` (monotonic s), after a wait meant to end at
        `deadline` (None: no wait)."""
        late = max(0.0, (now - deadline) * 1e3) if deadline is not None else 0.0
        if counted:
            self.wake_late_max_ms = max(self.wake_late_max_ms, late)
        self._wake_late_ms = late
        self._resumed_at = now
        for work in self._work.values():
            work[:] = [0.0, 0.0, 0]

    def late(self, now: float, late_ms: float, episode: int, sim_s: float, what: str = "tick",
             tick_sent_at: float | None = None, answered_at: float | None = None) -> None:
        """A publication (`what`) due late_ms ago was reached at `now`; its episode and stamp
        (sim s into the episode); when the last control tick went out and the last arm
        command came in (monotonic s)."""
        self.late_max_ms = max(self.late_max_ms, late_ms)
        self.late_over_10ms += late_ms > 10.0
        if late_ms <= self.event_ms:
            return
        self.late_events_total += 1
        step, render = self._work["step"], self._work["render"]
        event = {
            "monotonic_s": round(now, 4), "what": what, "episode": episode, "sim_s": round(sim_s, 3),
            "late_ms": round(late_ms, 2),
            "work_ms": round((now - self._resumed_at) * 1e3, 2) if self._resumed_at is not None else None,
            "wake_late_ms": round(self._wake_late_ms, 2),
            "steps": step[2], "step_ms": round(step[0], 2), "step_cpu_ms": round(step[1], 2),
            "renders": render[2], "render_ms": round(render[0], 2), "render_cpu_ms": round(render[1], 2),
            "since_tick_ms": round((now - tick_sent_at) * 1e3, 2) if tick_sent_at else None,
            "answer_ms": (round((answered_at - tick_sent_at) * 1e3, 2)
                          if tick_sent_at and answered_at and answered_at >= tick_sent_at else None),
        }
        self.events.append(event)
        if late_ms > WORST_MS:
            self.worst.append(event)

    def overrun(self, late_ms: float) -> None:
        """The loop skipped late_ms of wall time (WallClockPacer.pace, OVERRUN_PERIODS)."""
        self.overruns += 1
        self.skipped_ms += late_ms

    def values(self) -> dict[str, str]:
        """The diagnostics key-values (strings)."""
        return {
            "loop_late_max_ms": f"{self.late_max_ms:.2f}",
            "loop_late_over_10ms": str(self.late_over_10ms),
            "loop_late_events": str(self.late_events_total),
            "loop_overruns": str(self.overruns),
            "loop_skipped_ms": f"{self.skipped_ms:.1f}",
            "loop_wake_late_max_ms": f"{self.wake_late_max_ms:.2f}",
            "step_max_ms": f"{self.step_max_ms:.2f}",
            "render_max_ms": f"{self.render_max_ms:.2f}",
            "step_cpu_max_ms": f"{self.step_cpu_max_ms:.2f}",
            "render_cpu_max_ms": f"{self.render_cpu_max_ms:.2f}",
            "start_render_max_ms": f"{self.start_render_max_ms:.2f}",
            "loop_late_latest": json.dumps(list(self.events), separators=(",", ":")),
            "loop_late_over_10ms_latest": json.dumps(list(self.worst), separators=(",", ":")),
        }


class AnswerTiming:
    """How a controller answered the control ticks in realtime, from its own side: for each
    tick, when its /clock callback ran, when the tick's joint state callback ran (sim_node
    writes /clock first, then the joint state; the tick acts once both are here) and when the
    arm command went out, on the system clock (one machine's for every process, so a reader
    can set these beside the DDS source timestamps of sim_node's writes). An answer is kept
    (the KEEP latest) when its command went out more than 1.5 control periods after the one
    before (a late period as sim_node sees it), or more than EVENT_MS after the later callback
    (the controller's own work)."""

    def __init__(self, control_rate: int, event_ms: float = EVENT_MS, keep: int = KEEP):
        self.period_ns = 1e9 / control_rate
        self.event_ms = event_ms
        self.answers = 0
        self.act_max_ms = 0.0
        self.joint_after_clock_max_ms = 0.0
        self.late = 0
        self.events: deque[dict] = deque(maxlen=keep)
        self._previous_ns: int | None = None

    def answered(self, stamp_ns: int, clock_in_ns: int | None, joint_in_ns: int, written_ns: int) -> None:
        """The command for the tick stamped stamp_ns went out at written_ns; the tick's /clock
        callback ran at clock_in_ns (None: not seen) and its joint state's at joint_in_ns."""
        self.answers += 1
        ready_ns = max(joint_in_ns, clock_in_ns or joint_in_ns)
        act_ms = (written_ns - ready_ns) / 1e6
        joint_after_ms = (joint_in_ns - clock_in_ns) / 1e6 if clock_in_ns is not None else None
        self.act_max_ms = max(self.act_max_ms, act_ms)
        if joint_after_ms is not None:
            self.joint_after_clock_max_ms = max(self.joint_after_clock_max_ms, joint_after_ms)
        gap_ms = (written_ns - self._previous_ns) / 1e6 if self._previous_ns is not None else None
        self._previous_ns = written_ns
        if act_ms > self.event_ms or (gap_ms is not None and gap_ms > 1.5 * self.period_ns / 1e6):
            self.late += 1
            self.events.append({"stamp_ns": stamp_ns, "stamp_s": round(stamp_ns / 1e9, 3), "clock_in_ns": clock_in_ns,
                                "joint_in_ns": joint_in_ns, "written_ns": written_ns,
                                "since_previous_ms": round(gap_ms, 2) if gap_ms is not None else None,
                                "act_ms": round(act_ms, 2),
                                "joint_after_clock_ms": None if joint_after_ms is None else round(joint_after_ms, 2)})

    def end_episode(self) -> None:
        """The next answer starts a new episode: no period to the one before."""
        self._previous_ns = None

    def values(self) -> dict[str, str]:
        """The diagnostics key-values (strings)."""
        return {"answers_timed": str(self.answers), "answers_late": str(self.late),
                "answer_act_max_ms": f"{self.act_max_ms:.2f}",
                "answer_joint_after_clock_max_ms": f"{self.joint_after_clock_max_ms:.2f}",
                "answers_late_latest": json.dumps(list(self.events), separators=(",", ":"))}
