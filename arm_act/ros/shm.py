"""Stale Fast DDS shared-memory files: what a node process killed with SIGKILL leaves behind.

Fast DDS's shared-memory transport keeps, per segment and per port, a file in /dev/shm and a
lock file beside it (`fastdds_<id>_el` / `_sl`, `fastdds_port<N>_el` / `_sl`) that the owning
process holds with flock while it lives. A process that dies without closing them (an OOM
kill, a crash in a native library) leaves the files, and a new participant that picks up such
a port can receive nothing (eProsima/Fast-DDS#5053, #5469). rmw_fastrtps uses shared memory
whatever FASTDDS_BUILTIN_TRANSPORTS says once ROS_AUTOMATIC_DISCOVERY_RANGE is LOCALHOST,
our default, so the nodes remove such files at start instead: a lock file that nobody holds
belongs to a dead process, and it goes with its segment (and a port's semaphore). This is
what Fast DDS's own `fastdds shm clean` does. ARM_ACT_SHM_CLEAN=0 turns it off.
"""
from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path

SHM_DIR = Path("/dev/shm")
SEGMENT_LOCK = re.compile(r"^fastdds_[0-9a-z]{16}_(el|sl)$")
PORT_LOCK = re.compile(r"^fastdds_port\d{1,5}_(el|sl)$")
SWITCH = "ARM_ACT_SHM_CLEAN"


def _held(path: Path) -> bool:
    """Whether some process holds the lock file (a living owner)."""
    try:
        with open(path, "ab") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(handle, fcntl.LOCK_UN)
        return False
    except OSError:
        return True


def _remove(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except OSError:
        return False


def clean_stale_shm(directory: Path = SHM_DIR) -> int:
    """Remove the shared-memory files of Fast DDS segments and ports whose owner is dead.
    -> the number of files removed (0 when there is no such directory or nothing stale)."""
    if os.environ.get(SWITCH, "1").strip() == "0":
        return 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    removed = 0
    for name in names:
        port = PORT_LOCK.match(name)
        if not (port or SEGMENT_LOCK.match(name)):
            continue
        lock = directory / name
        if _held(lock):
            continue
        base = name[:-3]
        stale = [lock, directory / base]
        if port:
            stale.append(directory / f"sem.{base}_mutex")
        removed += sum(_remove(p) for p in stale)
    return removed
