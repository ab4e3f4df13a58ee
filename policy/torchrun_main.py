"""`python -m arm_act.policy.torchrun_main ARGS`: torchrun (torch.distributed.run) as
`arm_act.policy.distributed.torchrun` starts it, ending on a stop signal with one line.

On Ctrl-C (or SIGTERM) torchrun's agent raises SignalException out of its main, and the
interpreter printed a 40-line traceback of torch's launcher under the ranks' own "interrupted"
lines. Here it is one line, and the exit status is the shell's for the signal (130 for SIGINT).
Every other outcome is torchrun's own: its exit status, and its report of a failed rank.

After a stop signal the process ends with os._exit once its line is out: the agent has stopped
the ranks by then, and it leaves the rendezvous open on purpose (a signal does not close it),
so its keep-alive timer thread, a daemon, still runs. In an interpreter shutdown that thread
could be frozen halfway through a message, and the shutdown's final flush then wrote a partial
line ("Exception ignored in: ") in front of the next process's output (arm-act's own last line,
seen once in the test suite).

A Ctrl-C at a terminal reaches torchrun twice: from the terminal, and passed on by arm-act
(arm_act.policy.distributed.torchrun). The agent stops the ranks with the first; a second
SIGINT raised inside that stop, and the agent's `finally` then sent the ranks SIGTERM 0.25 s
later, before rank 0 had saved its training state (seen once in the test suite). After the
first stop signal, further SIGINTs are ignored here; a SIGTERM still ends the stop early."""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence


def _ignore_repeated_interrupts() -> None:
    """Wrap the agent's stop-signal handler so that once it has run, SIGINT is ignored."""
    from torch.distributed.elastic.multiprocessing import api

    handler = api._terminate_process_handler

    def once(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        handler(signum, frame)

    api._terminate_process_handler = once  # the agent installs it by this name when it starts


def main(argv: Sequence[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun

    _ignore_repeated_interrupts()
    try:
        torchrun(list(sys.argv[1:] if argv is None else argv))
    except SignalException as exc:
        print(f"torchrun: stopped by {exc.sigval.name}; the ranks were stopped", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(128 + int(exc.sigval))
    return 0


if __name__ == "__main__":
    sys.exit(main())
