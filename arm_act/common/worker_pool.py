"""Episodes spread over local worker processes: each process builds one worker (its own
PyBullet env, its own policy) and runs the items the parent hands it until there are none.

    run_in_processes(CollectionWorker, (config,), "collect", specs, workers=2, done=records.append)

`factory(*args)` runs in the worker process and must return a context manager; `method` is
the name of its method that takes one item and returns one result. Results reach `done`
in the order they finish. Processes are spawned, never forked: PyBullet and DDS state must
not be copied into a child. A worker that fails to start, or an item that raises, stops the
run with WorkerError (one line: which item and what it raised), and so does a worker
process that dies.

Each worker has one pipe of its own, written only by it and by the parent: the parent
sends it an item, it sends the result back, and the parent sends the next item, or None
when there is none left. A shared queue has two faults this avoids: a worker that dies
while its feeder thread is writing leaves the queue's write lock taken, so every other
worker waits on it forever (that hung CI once); and its named semaphores are the resource
tracker's to clean up, so a run stopped by a signal at the wrong moment ended with the
tracker's "leaked semaphore" warnings (CI again). A dead worker shows as the end of its
pipe, at once, even in the middle of a message. Workers ignore SIGINT: a Ctrl-C interrupts
the parent, which terminates them; a worker also ends when its parent dies.
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


def _worker_process(factory: Callable[..., Any], args: tuple, method: str, pipe: Connection) -> None:
    # Ctrl-C reaches the whole process group; it is the parent's to handle, and the parent
    # then terminates the workers. A worker whose parent dies goes too (SIGTERM).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    try:
        worker = factory(*args)
    except Exception as exc:  # noqa: BLE001 - crosses the process boundary as one line
        pipe.send((None, None, f"worker start: {type(exc).__name__}: {exc}"))
        return
    with worker:
        run = getattr(worker, method)
        pipe.send((None, None, None))  # ready: the parent sends the first item
        while (task := pipe.recv()) is not None:
            index, item = task
            try:
                pipe.send((index, run(item), None))
            except Exception as exc:  # noqa: BLE001 - crosses the process boundary as one line
                pipe.send((index, None, f"{_name(item)}: {type(exc).__name__}: {exc}"))


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
    pending = iter(enumerate(items))
    pipes: dict[Connection, BaseProcess] = {}

    def hand_out(pipe: Connection) -> None:
        """The next item to this worker, or None (it then exits)."""
        try:
            pipe.send(next(pending, None))
        except OSError:  # it has died: its pipe's end is read next, and says how
            pass

    try:
        for _ in range(min(workers, len(items))):
            mine, theirs = context.Pipe(duplex=True)
            process = context.Process(target=_worker_process, args=(factory, args, method, theirs), daemon=True)
            pipes[mine] = process
            process.start()
            theirs.close()  # the worker's copy is the only one left: its death ends the pipe
        remaining = len(items)
        while remaining:
            for pipe in wait(list(pipes), timeout=POLL_S):
                try:
                    index, result, error = pipe.recv()
                except (EOFError, OSError):  # OSError: the pipe ended in the middle of a message
                    process = pipes.pop(pipe)
                    pipe.close()
                    _ended(process)
                    if not pipes:
                        raise WorkerError("every worker process exited before the run was complete") from None
                    continue
                if error is not None:
                    raise WorkerError(error)
                if index is not None:
                    done(index, result)
                    remaining -= 1
                hand_out(pipe)  # after a result or the worker's "ready"
    finally:
        for pipe, process in pipes.items():
            if process.is_alive():
                process.terminate()
            process.join(timeout=10.0)
            pipe.close()
