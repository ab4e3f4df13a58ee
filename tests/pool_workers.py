"""The worker classes of the process-pool tests (tests/test_eval_workers.py), apart from them."""
from __future__ import annotations

import os
import signal
import time


class Squares:
    """A worker for the pool tests. Spawned processes import it from here, a module that
    imports nothing heavy, so each worker starts in a fraction of a second instead of
    importing torch, rclpy and the CLI with the test module."""

    def __init__(self, fail_on: int | None = None, die_on: int | None = None, refuse: bool = False,
                 kill_on: int | None = None, big: bool = False):
        if refuse:
            raise OSError("no sim for this worker")
        self.fail_on, self.die_on, self.kill_on, self.big, self.pid = fail_on, die_on, kill_on, big, os.getpid()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def square(self, item: int) -> tuple[int, int] | tuple[int, int, bytes]:
        if item == self.fail_on:
            raise ValueError(f"item {item} is bad")
        if item == self.die_on:
            os._exit(3)
        if item == self.kill_on:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.big:
            return item * item, self.pid, bytes(4 << 20)
        return item * item, self.pid


class Sleeper:
    """A worker whose items take a while (for the Ctrl-C test)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def nap(self, item: int) -> int:
        time.sleep(0.5)
        return item
