"""Stale Fast DDS shared-memory files are removed at a node's start, held ones never."""
import fcntl
import time

import pytest

from arm_act.ros.shm import clean_stale_shm

pytestmark = pytest.mark.unit


def test_only_files_whose_lock_nobody_holds_are_removed(tmp_path, monkeypatch):
    monkeypatch.delenv("ARM_ACT_SHM_CLEAN", raising=False)
    dead_segment, live_segment = "fastdds_0123456789abcdef", "fastdds_fedcba9876543210"
    dead_port = "fastdds_port7411"
    names = [dead_segment, dead_segment + "_el", live_segment, live_segment + "_el",
             dead_port, dead_port + "_el", f"sem.{dead_port}_mutex", "fastdds_notours", "other_file"]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    with open(tmp_path / (live_segment + "_el"), "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a living owner holds its lock
        assert clean_stale_shm(tmp_path, now=time.time() + 60) == 5
        left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([live_segment, live_segment + "_el", "fastdds_notours", "other_file"])
    assert clean_stale_shm(tmp_path / "missing") == 0


def test_it_can_be_switched_off(tmp_path, monkeypatch):
    (tmp_path / "fastdds_0123456789abcdef_el").write_bytes(b"")
    monkeypatch.setenv("ARM_ACT_SHM_CLEAN", "0")
    assert clean_stale_shm(tmp_path) == 0 and len(list(tmp_path.iterdir())) == 1


def test_a_newborn_lock_and_a_port_with_one_held_lock_are_kept(tmp_path, monkeypatch):
    monkeypatch.delenv("ARM_ACT_SHM_CLEAN", raising=False)
    newborn, port = "fastdds_0123456789abcdef", "fastdds_port7412"
    names = [newborn, newborn + "_el", port, port + "_el", port + "_sl", f"sem.{port}_mutex"]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    with open(tmp_path / (port + "_el"), "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the port's listener holds its exclusive lock; _sl is free
        assert clean_stale_shm(tmp_path) == 0  # the segment was just made: its owner may lock it next
        assert clean_stale_shm(tmp_path, now=time.time() + 60) == 2  # later: the unheld segment goes
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])
