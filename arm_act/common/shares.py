"""Preparation work split between the data-parallel processes of one machine.

Under torchrun every training process needs the same prepared data: the bags decoded into
the training cache, the grounding layouts rendered. Without a split each process does all
of it, so two processes on two cores take as long as one. With a split, each process does
every N-th item (N = LOCAL_WORLD_SIZE, by position, so every process agrees on who does
what), writes it to the shared cache, then waits for the others' items to appear there.

    rank, size = local_share()
    mine = items[rank::size]
    ... make mine into the cache ...
    left = wait_for_others(theirs, in_cache, "bags")   # normally empty
    ... make what is left here ...

There is no process group and no collective here, only files: the process group is
joined later, by training, exactly as without the split. A process whose share never
arrives (it stopped, or its cache is another directory) costs the waiting process
`stall_s` without any new item, after which the waiting process does the rest itself, so
the result is the same either way.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

STALL_S = 300.0  # waiting this long without one new item from the others: do the rest here


def local_share() -> tuple[int, int]:
    """(this process's index, how many processes) among the data-parallel processes of this
    machine: torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE, (0, 1) outside torchrun."""
    try:
        rank, size = int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1
    return (rank, size) if 0 <= rank < size else (0, 1)


def wait_for_others(pending: Sequence[T], present: Callable[[T], bool], what: str, *,
                    stall_s: float = STALL_S, poll_s: float = 1.0) -> list[T]:
    """Wait until present(item) holds for every item of the other processes' shares; ->
    the items still missing when stall_s passed without a new one (for the caller to make
    itself), normally none."""
    missing = [item for item in pending if not present(item)]
    if not missing:
        return []
    logger.info("waiting for %d %s from the other processes", len(missing), what)
    started = last_new = time.monotonic()
    while missing:
        time.sleep(poll_s)
        still = [item for item in missing if not present(item)]
        now = time.monotonic()
        if len(still) < len(missing):
            last_new = now
        missing = still
        if missing and now - last_new > stall_s:
            logger.warning("%d %s from the other processes did not arrive (nothing new for %.0f s); "
                           "making them here", len(missing), what, stall_s)
            return missing
    logger.info("the other processes' %s arrived after %.0f s", what, time.monotonic() - started)
    return []
