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
seen once in the test suite)."""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun

    try:
        torchrun(list(sys.argv[1:] if argv is None else argv))
    except SignalException as exc:
        print(f"torchrun: stopped by {exc.sigval.name}; the ranks were stopped", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(128 + int(exc.sigval))
    return 0


if __name__ == "__main__":
    sys.exit(main())
