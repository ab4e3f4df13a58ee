"""`python -m arm_act.policy.torchrun_main ARGS`: torchrun (torch.distributed.run) as
`arm_act.policy.distributed.torchrun` starts it, ending on a stop signal with one line.

On Ctrl-C (or SIGTERM) torchrun's agent raises SignalException out of its main, and the
interpreter printed a 40-line traceback of torch's launcher under the ranks' own "interrupted"
lines. Here it is one line, and the exit status is the shell's for the signal (130 for SIGINT).
Every other outcome is torchrun's own: its exit status, and its report of a failed rank."""
from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun

    try:
        torchrun(list(sys.argv[1:] if argv is None else argv))
    except SignalException as exc:
        print(f"torchrun: stopped by {exc.sigval.name}; the ranks were stopped", file=sys.stderr, flush=True)
        return 128 + int(exc.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
