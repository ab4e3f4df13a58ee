"""What a process does on its way out after a Ctrl-C it caught."""
from __future__ import annotations


def forget_interrupt() -> None:
    """Let the exit status stand after a KeyboardInterrupt that was caught.

    CPython remembers a KeyboardInterrupt that propagated out of exec() or eval() of a string
    (dataclasses and namedtuple build their methods that way, so an import or a class made at
    the moment of the Ctrl-C is enough) and, when a process run with `python -m` ends, kills
    it with SIGINT instead of exiting with its status, even though the interrupt was caught: a
    Ctrl-C that should end with 130 ended with -2 now and then. The next exec of a string
    clears that memory, so this runs an empty one."""
    exec("")
