"""Episodes spread over local worker processes: each process builds one worker (its own
PyBullet env, its own policy) and runs items from a shared queue until there are none.

    run_in_processes(CollectionWorker, (config,), "collect", specs, workers=2, done=records.append)

`factory(*args)` runs in the worker process and must return a context manager; `method` is
the name of its method that takes one item and returns one result. Results reach `done`
in the order they finish. Processes are spawned, never forked: PyBullet and DDS state must
not be copied into a child. A worker that fails to start, or an item that raises, stops the
run with WorkerError (one line: which item and what it raised). Workers ignore SIGINT: a
Ctrl-C interrupts the parent, which terminates them; a worker also ends when its parent
dies.
"""
from __future__ import annotations

import multiprocessing
import queue
import signal
from collections.abc import Callable, Sequence
from typing import Any

from arm_act.common.processes import die_with_parent

POLL_S = 1.0  # how often the parent checks that some worker is still alive


class WorkerError(RuntimeError):
    """A worker process could not start, died, or an item raised in it."""


def _worker_process(factory: Callable[..., Any], args: tuple, method: str, tasks, results) -> None:
    # Ctrl-C reaches the whole process group; it is the parent's to handle, and the parent
    # then terminates the workers. A worker whose parent dies goes too (SIGTERM).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    try:
        worker = factory(*args)
    except Exception as exc:  # noqa: BLE001 - crosses the process boundary as one line
        results.put((None, None, f"worker start: {type(exc).__name__}: {exc}"))
        return
    with worker:
        run = getattr(worker, method)
        while (task := tasks.get()) is not None:
            index, item = task
            try:
                results.put((index, run(item), None))
            except Exception as exc:  # noqa: BLE001 - crosses the process boundary as one line
                results.put((index, None, f"{_name(item)}: {type(exc).__name__}: {exc}"))


def _name(item) -> str:
    seed = getattr(item, "seed", None)
    return f"seed {seed}" if seed is not None else repr(item)


def run_in_processes(factory: Callable[..., Any], args: tuple, method: str, items: Sequence[Any], workers: int,
                     done: Callable[[int, Any], None]) -> None:
    """Run worker.method(item) for every item in `workers` spawned processes; done(index,
    result) in the parent as each finishes. Raises WorkerError (module docstring)."""
    if workers < 1:
        raise ValueError(f"workers={workers} must be >= 1")
    if not items:
        return
    context = multiprocessing.get_context("spawn")
    tasks, results = context.Queue(), context.Queue()
    for task in enumerate(items):
        tasks.put(task)
    processes = [context.Process(target=_worker_process, args=(factory, args, method, tasks, results), daemon=True)
                 for _ in range(min(workers, len(items)))]
    for process in processes:
        tasks.put(None)
        process.start()
    try:
        for _ in items:
            while True:
                try:
                    index, result, error = results.get(timeout=POLL_S)
                    break
                except queue.Empty:
                    if not any(p.is_alive() for p in processes):
                        raise WorkerError("every worker process exited before the run was complete") from None
            if error is not None:
                raise WorkerError(error)
            done(index, result)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join(timeout=10.0)
