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
