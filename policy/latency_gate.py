"""LatencyGate: when a computed chunk may act (the stage between the network and the chunk
executor).

A chunk (K, A) computed from the camera pair of tick c holds the actions for ticks
c .. c+K-1 and is usable from tick c + latency_ticks. Until then the chunks before it keep
driving the arm (its first latency_ticks actions are simply in the past). Counting the delay
in ticks rather than measuring it per call makes an episode the same on any machine, and
over ROS in lockstep.

    gate = LatencyGate(latency_ticks=1)
    gate.expect(c)                      # inference on tick c's pair has started
    gate.add(c, actions, target)        # ... and finished: usable from c + 1
    gate.awaiting(t)                    # lockstep waits while a chunk due by t is computing
    for start, actions, target in gate.due(t): executor.add_chunk(start, actions)

After a grasp is reopened, `drop_until(t)` discards every chunk computed before tick t + 1:
those carry on with the grasp that missed.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class DueChunk(NamedTuple):
    start: int  # the tick of the camera pair it was computed from
    actions: np.ndarray  # (K, A)
    target: np.ndarray | None  # (3,) the same inference's target estimate, m, or None


class LatencyGate:
    """Chunks wait here until their usable tick; see the module docstring."""

    def __init__(self, latency_ticks: int):
        if isinstance(latency_ticks, bool) or int(latency_ticks) != latency_ticks or latency_ticks < 0:
            raise ValueError(f"latency_ticks={latency_ticks} must be >= 0")
        self.latency_ticks = int(latency_ticks)
        self._ready: list[tuple[int, DueChunk]] = []  # (usable tick, chunk), not yet due
        self._expected: set[int] = set()  # start ticks whose chunk is being computed
        self._drop_before = -1  # chunks from pairs before this tick are dropped
        self.dropped = 0  # chunks discarded by drop_until, this episode

    def reset(self) -> None:
        """A new episode: forget every waiting chunk. Inferences already under way stay
        expected (policy_node starts the first one on the tick that also starts the
        episode); their caller `forget`s those that end up unused."""
        self._ready.clear()
        self._drop_before = -1
        self.dropped = 0

    def usable_tick(self, start_tick: int) -> int:
        """The first tick at which the chunk computed from tick `start_tick`'s pair may act."""
        return int(start_tick) + self.latency_ticks

    def expect(self, start_tick: int) -> None:
        self._expected.add(int(start_tick))

    def forget(self, start_tick: int) -> None:
        """That inference failed or was dropped: do not wait for it."""
        self._expected.discard(int(start_tick))

    def is_known(self, start_tick: int) -> bool:
        """A chunk from `start_tick` is being computed or waits to become usable."""
        start = int(start_tick)
        return start in self._expected or any(chunk.start == start for _, chunk in self._ready)

    def awaiting(self, tick: int) -> bool:
        """Whether a chunk usable by `tick` is still being computed."""
        return any(self.usable_tick(start) <= tick for start in self._expected)

    def add(self, start_tick: int, actions: np.ndarray, target: np.ndarray | None = None,
            usable_tick: int | None = None) -> bool:
        """The chunk computed from the pair of `start_tick`, usable from `usable_tick`
        (default: start_tick + latency_ticks). False when it is dropped: computed from a
        pair before the last `drop_until`."""
        start = int(start_tick)
        self._expected.discard(start)
        if start < self._drop_before:
            self.dropped += 1
            return False
        usable = self.usable_tick(start) if usable_tick is None else int(usable_tick)
        chunk = DueChunk(start, np.asarray(actions), None if target is None else np.asarray(target))
        self._ready.append((usable, chunk))
        return True

    def due(self, tick: int) -> list[DueChunk]:
        """Every waiting chunk usable by `tick`, oldest pair first; they leave the gate."""
        due = sorted((chunk for usable, chunk in self._ready if usable <= tick), key=lambda c: c.start)
        self._ready = [item for item in self._ready if item[0] > tick]
        return due

    def drop_until(self, tick: int) -> None:
        """Discard every waiting chunk, and every later one computed from a pair up to and
        including `tick` (that pair still saw the grasp being dropped)."""
        self.dropped += len(self._ready)
        self._ready.clear()
        self._drop_before = int(tick) + 1

    def diagnostics(self) -> dict[str, int]:
        return {"latency_ticks": self.latency_ticks, "chunks_waiting": len(self._ready),
                "chunks_computing": len(self._expected), "chunks_dropped": self.dropped}
