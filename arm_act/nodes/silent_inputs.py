"""Subscriptions that went silent while the node's other inputs still arrive: made again.

Once, a policy_node started in place of a killed one received `/clock`, joint states and the
episodes but not one camera image for 120 s (docs/ros.md, "The next episode after a
restart"): the camera subscriptions alone never matched their publisher. The process is alive,
so launch's `respawn` does not help. A new subscription is a new DDS reader, discovered and
matched afresh; so when no message has come on these subscriptions for `timeout_s` of wall
time since they were made or last delivered, while the node's other inputs do arrive, they are
destroyed and made again, with a warning. The wait doubles after each try (up to 8x), so a
camera that is really off costs a warning now and then, not a stream of them.
"""
from __future__ import annotations

import time
from collections.abc import Callable

MAX_BACKOFF = 8


class SilentInputs:
    """Subscriptions made by `create()` (a list), re-made while silent (module docstring)."""

    def __init__(self, node, create: Callable[[], list], timeout_s: float, what: str):
        self.node, self.create, self.timeout_s, self.what = node, create, float(timeout_s), what
        self.subscriptions = create()
        self.since = time.monotonic()  # made, or the last message
        self.resubscriptions = 0
        self._backoff = 1

    def received(self) -> None:
        """A message came on one of them (any thread)."""
        self.since = time.monotonic()
        self._backoff = 1

    def check(self, others_arrive: bool, now: float | None = None) -> bool:
        """On the node's executor thread: make them again when silent for too long while
        `others_arrive`; whether it did. timeout_s <= 0 turns this off."""
        now = time.monotonic() if now is None else now
        silent = now - self.since
        if self.timeout_s <= 0 or not others_arrive or silent < self.timeout_s * self._backoff:
            return False
        for subscription in self.subscriptions:
            self.node.destroy_subscription(subscription)
        self.subscriptions = self.create()
        self.since = now
        self.resubscriptions += 1
        self._backoff = min(MAX_BACKOFF, self._backoff * 2)
        self.node.get_logger().warning(
            f"no {self.what} for {silent:.1f} s while other inputs arrive; subscribed again "
            f"({self.resubscriptions} time(s); next try after {self.timeout_s * self._backoff:.0f} s of silence)")
        return True
