"""Input hygiene shared by the nodes: a subscription callback never lets an exception out.

An exception that escapes a callback ends rclpy's spin, and with it the process: one odd
message from any peer on the domain would stop the arm. Every callback of our nodes is
wrapped with `guarded(what)`: a message it cannot use is counted per input and named in a
warning, at most once every few seconds per input (`Rejections`), and the node goes on
with its last good state. The conversions raise ConversionError with the reason; anything
else that goes wrong is reported the same way, as a rejected message.
"""
from __future__ import annotations

import functools
import threading
import time

WARN_EVERY_S = 5.0


class Rejections:
    """Counts rejected messages per input and throttles the warnings per input (rclpy's own
    throttling is per call site, so one noisy input would hide the others)."""

    def __init__(self, logger, every_s: float = WARN_EVERY_S):
        self.logger = logger
        self.every_s = every_s
        self.counts: dict[str, int] = {}
        self.kinds: dict[str, int] = {}  # exception type name -> count (tests: only ConversionError is expected)
        self._last_warned: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def reject(self, what: str, reason: object, kind: str = "ConversionError") -> None:
        now = time.monotonic()
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + 1
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            last = self._last_warned.get(what)
            if last is not None and now - last < self.every_s:
                self._suppressed[what] = self._suppressed.get(what, 0) + 1
                return
            self._last_warned[what] = now
            suppressed = self._suppressed.pop(what, 0)
        more = f" ({suppressed} more since the last warning)" if suppressed else ""
        text = str(reason)
        if len(text) > 300:
            text = text[:300] + "..."
        self.logger.warning(f"rejected {what}: {text}{more}")

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())


def guarded(what: str):
    """Decorator for a node method used as a callback: exceptions become a rejection of
    `what` on the node's `rejections` (created on first use). `what` may hold `{0}`, filled
    with the first positional argument (e.g. the camera name)."""

    def wrap(method):
        @functools.wraps(method)
        def inner(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the point of the guard: report, never die
                label = what.format(*args) if "{0}" in what else what
                rejections(self).reject(label, f"{type(exc).__name__}: {exc}", kind=type(exc).__name__)
                return None

        return inner

    return wrap


def rejections(node) -> Rejections:
    existing = node.__dict__.get("rejections")
    if existing is None:
        existing = node.__dict__["rejections"] = Rejections(node.get_logger())
    return existing


def guard_time_source(node) -> None:
    """rclpy's own /clock callback (the TimeSource behind use_sim_time) raises on a /clock
    message with negative seconds, which any peer can send, and that ends the spin of every
    node on sim time. Put a guarded callback in its place (now and for a later subscription):
    such a clock is rejected with a warning and the node's time stays where it was."""
    source = getattr(node, "_time_source", None)
    original = getattr(source, "clock_callback", None)
    if source is None or original is None or getattr(original, "_arm_act_guarded", False):
        return

    def clock_callback(msg) -> None:
        if msg.clock.sec < 0:
            rejections(node).reject("/clock", f"sim time {msg.clock.sec} s is negative; the node's clock stays")
            return
        try:
            original(msg)
        except Exception as exc:  # noqa: BLE001 - rclpy's time source: report, never die
            rejections(node).reject("/clock", f"{type(exc).__name__}: {exc}", kind=type(exc).__name__)

    clock_callback._arm_act_guarded = True
    source.clock_callback = clock_callback
    subscription = getattr(source, "_clock_sub", None)
    if subscription is not None:
        subscription.callback = clock_callback
