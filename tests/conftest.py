"""Shared fixtures. ROS tests run on a private rclpy.Context in their own DDS domain,
restricted to localhost, so parallel runs never see each other."""
from __future__ import annotations

import itertools
import os
import time

import pytest

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
_domain_ids = itertools.count(100 + (os.getpid() % 50) * 2)


@pytest.fixture
def ros_context():
    """A private, initialised rclpy context in a fresh domain; shut down afterwards."""
    import rclpy

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=next(_domain_ids) % 230)
    try:
        yield context
    finally:
        if context.ok():
            rclpy.shutdown(context=context)


def spin_until(executor, condition, timeout: float, step: float = 0.05) -> bool:
    """Spin `executor` until condition() is true or `timeout` wall seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        executor.spin_once(timeout_sec=step)
    return condition()


class spinning:
    """Context manager: spin `executor` in a background thread (executor.spin() serves every
    ready callback each round; spin_once from a loop can starve late subscriptions)."""

    def __init__(self, executor):
        import threading

        self.executor = executor
        self.thread = threading.Thread(target=self._spin, daemon=True)

    def _spin(self):
        try:
            self.executor.spin()
        except Exception:  # the context shut down under it at the end of the test
            pass

    def __enter__(self):
        self.thread.start()
        return self.executor

    def __exit__(self, *exc):
        self.executor.shutdown(timeout_sec=5.0)
        self.thread.join(timeout=5.0)


def wait_for(condition, timeout: float, step: float = 0.02) -> bool:
    """Poll condition() until true or timeout (while a `spinning` executor serves callbacks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()
