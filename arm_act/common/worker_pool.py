"""Episodes spread over local worker processes: each process builds one worker (its own
PyBullet env, its own policy) and runs items from a shared queue until there are none.

    run_in_processes(CollectionWorker, (config,), "collect", specs, workers=2, done=records.append)

`factory(*args)` runs in the worker process and must return a context manager; `method` is
the name of its method that takes one item and returns one result. Results reach `done`
in the order they finish. Processes are spawned, never forked: PyBullet and DDS state must
not be copied into a child. A worker that fails to start, or an item that raises, stops the
run with WorkerError (one line: which item and what it raised), and so does a worker
process that dies.

Items go out on one shared queue; results come back on one pipe per worker, which only
that worker writes. A shared results queue would let a worker that dies while its feeder
thread is writing leave the queue's write lock taken, and every other worker would then
wait on it forever (that hung CI once). With a pipe of its own, a dead worker shows as the
end of its pipe, at once, even in the middle of a message. Workers ignore SIGINT: a
Ctrl-C interrupts the parent, which terminates them; a worker also ends when its parent
dies.
"""
from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from arm_act.common.processes import die_with_parent

POLL_S = 1.0  # the longest the parent waits before it looks at the workers again


class WorkerError(RuntimeError):
    """A worker process could not start, died, or an item raised in it."""


def _worker_process(factory: Callable[..., Any], args: tuple, method: str, tasks, results: Connection) -> None:
    # Ctrl-C reaches the whole process group; it is the parent's to handle, and the parent
    # then terminates the workers. A worker whose parent dies goes too (SIGTERM).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    try:
        worker = factory(*args)
    except Exception as exc:  # noqa: BLE001 - crosses the process boundary as one line
        results.send((None, None, f"worker start: {type(exc).__name__}: {exc}"))
        return
    with worker:
        run = getattr(worker, method)
        while (task := tasks.get()) is not None:
            index, item = task
            try:
                results.send((index, run(item), None))
            except Exception as exc:  # noqa: BLE001 - crosses the process boundary as one line
                results.send((index, None, f"{_name(item)}: {type(exc).__name__}: {exc}"))


def _name(item) -> str:
    seed = getattr(item, "seed", None)
    return f"seed {seed}" if seed is not None else repr(item)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _ended(process: BaseProcess) -> None:
    """A worker's pipe has ended: fine if it ran out of items and exited, WorkerError if it died."""
    process.join(timeout=10.0)
    code = process.exitcode
    if code is None or code == 0:
        return
    how = f"exited with code {code}" if code > 0 else f"was killed by {_signal_name(-code)}"
    raise WorkerError(f"a worker process {how} before the run was complete")


def run_in_processes(factory: Callable[..., Any], args: tuple, method: str, items: Sequence[Any], workers: int,
                     done: Callable[[int, Any], None]) -> None:
    """Run worker.method(item) for every item in `workers` spawned processes; done(index,
    result) in the parent as each finishes. Raises WorkerError (module docstring)."""
    if workers < 1:
        raise ValueError(f"workers={workers} must be >= 1")
    if not items:
        return
    context = multiprocessing.get_context("spawn")
    tasks = context.Queue()
    for task in enumerate(items):
        tasks.put(task)
    pipes: dict[Connection, BaseProcess] = {}
    try:
        for _ in range(min(workers, len(items))):
            tasks.put(None)
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(target=_worker_process, args=(factory, args, method, tasks, writer), daemon=True)
            pipes[reader] = process
            process.start()
            writer.close()  # the worker's copy is the only writer left: its death ends the pipe
        remaining = len(items)
        while remaining:
            for reader in wait(list(pipes), timeout=POLL_S):
                try:
                    index, result, error = reader.recv()
                except (EOFError, OSError):  # OSError: the pipe ended in the middle of a message
                    process = pipes.pop(reader)
                    reader.close()
                    _ended(process)
                    if not pipes:
                        raise WorkerError("every worker process exited before the run was complete") from None
                    continue
                if error is not None:
                    raise WorkerError(error)
                done(index, result)
                remaining -= 1
    finally:
        for process in pipes.values():
            if process.is_alive():
                process.terminate()
            process.join(timeout=10.0)
        for reader in pipes:
            reader.close()  # the ones still open
        # Tasks no worker will read may still sit in this process's feeder buffer; without
        # this, interpreter exit would wait for a pipe nobody drains.
        tasks.cancel_join_thread()
        tasks.close()
