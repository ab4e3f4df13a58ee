"""InferenceWorker: policy_node's inference thread and the one-job queue that feeds it.

The control tick never waits for inference (docs/architecture.md, "Threading"): the node
hands each camera pair to this worker as a Job, and the worker's thread runs the network
and hands the prediction back through a callback. The queue holds one job: a newer pair
replaces a pair still waiting, so realtime never falls behind, and the replaced job's tick
is forgotten by the selector (its chunk never comes). A failed inference is handed back to
a second callback; the thread goes on with the next job.

One thread per loaded model: `start` at configure, `stop` at cleanup. Each thread has its
own stop event, so a thread that outlives a cleanup (an inference that takes longer than
the join waits) stays stopped when the node configures again.
"""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from arm_act.common import realtime


class Job(NamedTuple):
    """A camera pair to infer on, with what the prediction is filed under."""

    episode: int
    tick: int  # the pair's control tick in its episode
    stamp_ns: int
    images: dict[str, np.ndarray]  # camera -> (H, W, 3)
    joints: np.ndarray  # (9,)
    instruction: str


# (job, prediction, time.perf_counter() when the worker took the job, the runtime, the thread's
# stop event) -> False to end the thread (the node was cleaned up meanwhile).
ChunkCallback = Callable[[Job, object, float, object, threading.Event], bool]
FailureCallback = Callable[[Job, Exception], None]


class InferenceWorker:
    """The inference thread of one loaded runtime at a time, and the queue of one job."""

    POLL_S = 0.1  # how often an idle thread looks at its stop event

    def __init__(self, priority: int = 0, logger=None):
        self.priority = priority  # SCHED_FIFO priority of the thread (0: the normal scheduler)
        self.logger = logger
        self.jobs: queue.Queue[Job] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self, runtime, on_chunk: ChunkCallback, on_failure: FailureCallback,
              need_attention: bool = False) -> None:
        """Start a thread that infers with `runtime` on every job until `stop`."""
        self._stop = threading.Event()  # per thread: one that outlived a cleanup stays stopped
        self.thread = threading.Thread(target=self._loop, name="inference", daemon=True,
                                       args=(runtime, self._stop, on_chunk, on_failure, need_attention))
        self.thread.start()

    def submit(self, job: Job, selector) -> None:
        """Queue `job`, replacing a job still waiting (the selector forgets that one's tick and
        expects this one's)."""
        try:
            selector.forget(self.jobs.get_nowait().tick)  # replaced before it ran: never comes
        except queue.Empty:
            pass
        selector.expect(job.tick)
        self.jobs.put_nowait(job)

    def drain(self) -> None:
        """Drop the job still waiting, if any."""
        try:
            while True:
                self.jobs.get_nowait()
        except queue.Empty:
            pass

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread and wait up to `timeout` s for it (not when called on the thread itself)."""
        self._stop.set()
        thread, self.thread = self.thread, None
        if thread is not None and thread.is_alive() and threading.current_thread() is not thread:
            thread.join(timeout=timeout)

    def _loop(self, runtime, stop: threading.Event, on_chunk: ChunkCallback, on_failure: FailureCallback,
              need_attention: bool) -> None:
        realtime.name_os_thread("inference")
        # Its own scheduling, not the one it inherits from the thread that configured the node
        # (the executor thread, on SCHED_FIFO once the node is up).
        realtime.realtime_thread(self.priority, "inference thread", self.logger)
        while not stop.is_set():
            try:
                job = self.jobs.get(timeout=self.POLL_S)
            except queue.Empty:
                continue
            started = time.perf_counter()
            try:
                pred = runtime.predict_chunk(job.images, job.joints, job.instruction, need_attention=need_attention)
            except Exception as exc:  # noqa: BLE001 - any failure: hold and report, never end the thread
                on_failure(job, exc)
                continue
            if not on_chunk(job, pred, started, runtime, stop):
                return
