"""Stale Fast DDS shared-memory files: what a node process killed with SIGKILL leaves behind.

Fast DDS's shared-memory transport keeps, per segment and per port, a file in /dev/shm and a
lock file beside it (`fastdds_<id>_el` / `_sl`, `fastdds_port<N>_el` / `_sl`) that the owning
process holds with flock while it lives. A process that dies without closing them (an OOM
kill, a crash in a native library) leaves the files, and a new participant that picks up such
a port can receive nothing (eProsima/Fast-DDS#5053, #5469). The node executables keep their
own data off shared memory by default (arm_act/ros/transport.py), but a node started with
ARM_ACT_DDS_TRANSPORT=shm, and any other ROS process on the machine, still uses it; so the
nodes also remove such files at start: a segment or port whose lock files nobody holds (all
of them: a port may have an exclusive and a shared one) and that are older than a few seconds
belongs to a dead process, and it goes with its lock files (and a port's semaphore). The age
rule spares the files of a process starting beside this one, between making a lock file and
locking it. This is what Fast DDS's own `fastdds shm clean` does. ARM_ACT_SHM_CLEAN=0 turns
it off.
"""
from __future__ import annotations

import fcntl
import os
import re
import time
from pathlib import Path

SHM_DIR = Path("/dev/shm")
SEGMENT_LOCK = re.compile(r"^fastdds_[0-9a-z]{16}_(el|sl)$")
PORT_LOCK = re.compile(r"^fastdds_port\d{1,5}_(el|sl)$")
SWITCH = "ARM_ACT_SHM_CLEAN"
# A lock file this new may belong to a process still setting up its segment or port: kept.
NEWBORN_S = 2.0


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


def _young(path: Path, now: float) -> bool:
    """Whether the file changed in the last NEWBORN_S seconds (or is gone already)."""
    try:
        return now - path.stat().st_mtime < NEWBORN_S
    except OSError:
        return True


def clean_stale_shm(directory: Path = SHM_DIR, now: float | None = None) -> int:
    """Remove the shared-memory files of Fast DDS segments and ports whose owner is dead: every
    lock file of the segment or port (`_el`, `_sl`) unheld, and none younger than NEWBORN_S
    (a process starting beside this one may have made a lock file and not yet locked it).
    -> the number of files removed (0 when there is no such directory or nothing stale)."""
    if os.environ.get(SWITCH, "1").strip() == "0":
        return 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    now = time.time() if now is None else now
    bases: dict[str, bool] = {}  # segment or port name -> whether it is a port
    for name in names:
        port = PORT_LOCK.match(name)
        if port or SEGMENT_LOCK.match(name):
            bases[name[:-3]] = bool(port)
    removed = 0
    for base, port in bases.items():
        locks = [directory / f"{base}_{kind}" for kind in ("el", "sl") if f"{base}_{kind}" in names]
        if any(_held(lock) or _young(lock, now) for lock in locks):
            continue
        stale = [*locks, directory / base]
        if port:
            stale.append(directory / f"sem.{base}_mutex")
        removed += sum(_remove(p) for p in stale)
    return removed
