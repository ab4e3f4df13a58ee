"""PolicyStats: policy_node's counters, and the policy/diagnostics status built from them.

The counters are written by the control tick, the callbacks and the inference thread, each
with the node's lock held; `diagnostic_values` turns them, with what the node reports of
itself (a DiagnosticsInput), into the key/value pairs of policy/diagnostics, in a fixed
order, and `diagnostic_status` into the status message.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

from arm_act.common import realtime
from arm_act.nodes.guard import rejections
from arm_act.nodes.scheduling import gc_values

# Counters that policy/diagnostics reports under their own names, in its order (after missed_ticks).
LATE_COUNTERS = ("inference_failures", "stale_ticks", "pairs_joint_mismatch", "stale_chunks_dropped",
                 "chunks_timed", "chunk_latency_ticks", "late_chunks", "rejected_images", "refused_instructions")


@dataclasses.dataclass
class DiagnosticsInput:
    """What policy/diagnostics reports of the node itself, beside the counters."""

    state: str
    lifecycle: str
    waiting: list[str]
    last_error: str
    observation_age_ns: int | None  # now minus the newest image's stamp; None before the first image
    missed_ticks: int
    rejected_messages: int
    commands: int
    timing: dict[str, str]  # realtime: the answer timing's values
    aim: object | None = None  # the selector's grasp assist, when on
    colour_balance: object | None = None  # the runtime's, when on
    refusal: str = ""  # why the running instruction is refused, "" when it is not
    resubscriptions: int = 0  # times the camera subscriptions were made again (silent_inputs.py)


def node_input(node, now_ns: int) -> DiagnosticsInput:
    """What policy/diagnostics reports of a PolicyNode itself (lock held)."""
    newest = node.sync.newest_stamp()
    return DiagnosticsInput(
        state=node.state, lifecycle=node.lifecycle_state, waiting=node.waiting, last_error=node.last_error,
        observation_age_ns=now_ns - newest if newest >= 0 else None, missed_ticks=node.missed_ticks,
        rejected_messages=rejections(node).total, commands=node.commands_published,
        timing=node.answer_timing.values() if node.mode == "realtime" else {},
        aim=None if node.selector is None else node.selector.aim,
        colour_balance=getattr(node.runtime, "colour_balance", None), refusal=node.refusals.reason,
        resubscriptions=node.cameras_in.resubscriptions)


class PolicyStats:
    """The counters policy/diagnostics reports, by name (`stats["stale_ticks"] += 1`), the
    number of chunks and the target head's last guess."""

    def __init__(self, control_rate: int):
        self.control_rate = control_rate
        self.counters: dict[str, float | int] = {
            "inference_ms": float("nan"), "deadline_misses": 0, "ticks_without_chunk": 0,
            "inference_failures": 0, "rejected_images": 0, "refused_instructions": 0,
            # realtime: ticks held on stale observations; camera pairs inferred with a joint
            # state of another tick; chunks of an ended episode, dropped
            "stale_ticks": 0, "pairs_joint_mismatch": 0, "stale_chunks_dropped": 0,
            # realtime: chunks and the sum of their latencies in control ticks (from the
            # pair's tick to the first tick whose command can use them), and those
            # later than 1 tick, the latency of the shipped in-process evaluation
            "chunks_timed": 0, "chunk_latency_ticks": 0, "late_chunks": 0}
        self.chunks = 0
        self.target_guess: np.ndarray | None = None  # the target head's last guess (3,) m
        self._last_tick_wall: float | None = None

    def __getitem__(self, name: str):
        return self.counters[name]

    def __setitem__(self, name: str, value) -> None:
        if name not in self.counters:
            raise KeyError(f"{name!r} is not one of the counters {list(self.counters)}")
        self.counters[name] = value

    def check_deadline(self, now: float | None = None) -> None:
        """Realtime, every control tick: count a deadline miss when more than 1.5 control
        periods of wall time (time.monotonic) passed since the last tick."""
        now = time.monotonic() if now is None else now
        if self._last_tick_wall is not None and now - self._last_tick_wall > 1.5 / self.control_rate:
            self.counters["deadline_misses"] += 1
        self._last_tick_wall = now

    def chunk_added(self, inference_ms: float, target: np.ndarray | None) -> None:
        """A chunk went to the selector after `inference_ms` of the worker's time."""
        self.counters["inference_ms"] = inference_ms
        self.chunks += 1
        self.target_guess = target

    def chunk_timed(self, latency_ticks: int) -> None:
        """Realtime: a chunk first usable `latency_ticks` after its camera pair's tick."""
        self.counters["chunks_timed"] += 1
        self.counters["chunk_latency_ticks"] += latency_ticks
        self.counters["late_chunks"] += int(latency_ticks > 1)

    def diagnostic_values(self, node: DiagnosticsInput) -> dict[str, str]:
        """policy/diagnostics' key/value pairs, in their order."""
        c = self.counters
        age = node.observation_age_ns
        values = {
            "state": node.state,
            "lifecycle": node.lifecycle,
            "waiting_for": "; ".join(node.waiting) or "nothing",
            "last_error": node.last_error or "none",
            "instruction_refused": node.refusal or "no",
            "inference_ms": f"{c['inference_ms']:.2f}",
            "observation_age_ms": f"{age / 1e6:.1f}" if age is not None else "nan",
            "ticks_without_fresh_chunk": str(c["ticks_without_chunk"]),
            "deadline_misses": str(c["deadline_misses"]),
            "missed_ticks": str(node.missed_ticks),
            **{name: str(c[name]) for name in LATE_COUNTERS},
            "rejected_messages": str(node.rejected_messages),
            "image_resubscriptions": str(node.resubscriptions),
            "chunks": str(self.chunks),
            "commands": str(node.commands),
            "memory_locked": str(realtime.memory_locked()).lower(),
            **gc_values(),
            **node.timing,
        }
        if self.target_guess is not None:  # the target head's guess of the named block (m)
            values["target_xyz_m"] = " ".join(f"{v:.3f}" for v in self.target_guess)
        aim = node.aim
        values["assist"] = "off" if aim is None else "on"
        balance = node.colour_balance
        values["colour_gains"] = ("off" if balance is None
                                  else " ".join(f"{g:.3f}" for g in balance.last_gains.tolist()))
        if aim is not None:  # the grasp point's shift now, and the largest this episode (cm)
            values["aim_shift_cm"] = f"{float(np.linalg.norm(aim.shift)) * 100:.2f}"
            values["aim_shift_cm_max"] = f"{aim.largest_shift * 100:.2f}"
            values["grasps_reopened"] = str(aim.misses)
            reflex = aim.reflex  # the re-grasp reflex's phase now ("-": the chunks drive)
            values["regrasp"] = "policy" if reflex is None else (reflex.phase if reflex.active else "-")
        return values


def diagnostic_status(values: dict[str, str], waiting: list[str]) -> DiagnosticStatus:
    """The policy/diagnostics status: OK while the state is ok or waiting (for a chunk) and no
    input is missing, else WARN; the message says the state and what is missing."""
    level = DiagnosticStatus.OK if values["state"] in ("ok", "waiting") else DiagnosticStatus.WARN
    if waiting:
        level = DiagnosticStatus.WARN
    message = values["state"] + (f": waiting for {values['waiting_for']}" if waiting else "")
    return DiagnosticStatus(level=level, name="policy_node: inference", message=message, hardware_id="arm_act",
                            values=[KeyValue(key=k, value=v) for k, v in values.items()])


def diagnostic_array(values: dict[str, str], waiting: list[str], stamp) -> DiagnosticArray:
    """The policy/diagnostics message: diagnostic_status's one status, stamped `stamp`."""
    array = DiagnosticArray(status=[diagnostic_status(values, waiting)])
    array.header.stamp = stamp
    return array


def lifecycle_waits(state: str, name: str, last_error: str) -> list[str]:
    """What an unconfigured or inactive node waits for, as `waiting` in its diagnostics:
    the transition to request, with the command that requests it."""
    if state == "unconfigured":
        return [f"configure (ros2 lifecycle set {name} configure)" + (f"; {last_error}" if last_error else "")]
    if state == "inactive":
        return [f"activate (ros2 lifecycle set {name} activate)"]
    return []
