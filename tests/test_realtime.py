"""Real-time scheduling of the deadline threads (arm_act/common/realtime.py): the API on real
threads, read back from the kernel (os.sched_getscheduler / sched_getparam on the thread's
native id, /proc/<pid>/task/<tid>/stat), and the node executables as launch starts them
(`<exe> --ros-args -r __node:=NAME --params-file config/X.yaml --params-file <tmp.yaml>`):
their deadline thread on SCHED_FIFO at `thread_priority`, normal with 0 or with
ARM_ACT_REALTIME_TUNING=0, and a bad value refused with its reason.

SCHED_FIFO needs root, CAP_SYS_NICE or an rtprio limit: where the system refuses it, the tests
that need it skip with the reason (the refusal path itself is tested by simulating EPERM)."""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arm_act.common import realtime

ROOT = Path(__file__).resolve().parents[1]


def _in_thread(fn):
    """Run fn() on a new thread; while it waits, read its scheduling back from outside."""
    out, ready, done = {}, threading.Event(), threading.Event()

    def body():
        out["tid"] = threading.get_native_id()
        try:
            out["result"] = fn()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc
        ready.set()
        done.wait(10)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        tid = out["tid"]
        out["seen"] = (os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority)
    finally:
        done.set()
        thread.join(10)
    if "error" in out:
        raise out["error"]
    return out


def _fifo_or_skip(priority: int) -> dict:
    out = _in_thread(lambda: realtime.set_thread_priority(priority))
    if not out["result"].fifo:
        pytest.skip(f"SCHED_FIFO not permitted here: {out['result'].reason}")
    return out


@pytest.mark.unit
def test_the_calling_thread_goes_on_sched_fifo_at_the_priority():
    out = _fifo_or_skip(37)
    result = out["result"]
    assert out["seen"] == (os.SCHED_FIFO, 37)  # the kernel's view of that thread
    assert (result.policy, result.priority, result.tid, result.ok) == ("SCHED_FIFO", 37, out["tid"], True)
    assert result.describe("sim_loop thread") == "sim_loop thread on SCHED_FIFO priority 37"
    # Only that thread: this one is still on the normal scheduler.
    assert os.sched_getscheduler(threading.get_native_id()) == os.SCHED_OTHER


@pytest.mark.unit
def test_priority_0_leaves_the_thread_on_the_normal_scheduler_and_undoes_an_inherited_fifo():
    out = _in_thread(lambda: realtime.set_thread_priority(0))
    assert out["seen"] == (os.SCHED_OTHER, 0)
    assert out["result"].policy == "SCHED_OTHER" and out["result"].ok
    assert "normal scheduler" in out["result"].describe("x")

    def inherit():  # a FIFO thread starts a thread: it inherits FIFO; 0 moves it back
        first = realtime.set_thread_priority(20)
        if not first.fifo:
            return first, None
        return first, _in_thread(lambda: (realtime.thread_scheduling(0), realtime.set_thread_priority(0)))

    first, child = _in_thread(inherit)["result"]
    if not first.fifo:
        pytest.skip(f"SCHED_FIFO not permitted here: {first.reason}")
    inherited, after = child["result"]
    assert inherited == ("SCHED_FIFO", 20)
    assert child["seen"] == (os.SCHED_OTHER, 0) and after.policy == "SCHED_OTHER"


@pytest.mark.unit
@pytest.mark.parametrize("bad", [-1, 100, 1000, True, 1.5, "50", None])
def test_a_priority_out_of_range_raises_a_clear_error(bad):
    low, high = realtime.priority_range()
    assert (low, high) == (1, 99)
    with pytest.raises(ValueError, match=r"must be 0 \(the normal scheduler\) or a SCHED_FIFO priority in 1 \.\. 99"):
        realtime.set_thread_priority(bad)
    assert realtime.check_priority(bad, "thread_priority").startswith("thread_priority must be")
    assert realtime.check_priority(0) is None and realtime.check_priority(99) is None


class _Logger:
    def __init__(self):
        self.lines = []

    def info(self, line):
        self.lines.append(("info", line))

    def warning(self, line):
        self.lines.append(("warning", line))


@pytest.mark.unit
def test_not_permitted_is_one_warning_and_the_thread_carries_on(monkeypatch):
    def refuse(pid, policy, param):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    out = _in_thread(lambda: realtime.set_thread_priority(50))
    result = out["result"]
    assert out["seen"] == (os.SCHED_OTHER, 0)
    assert not result.fifo and not result.ok
    assert "not permitted" in result.reason and "SYS_NICE" in result.reason
    assert "Operation not permitted" in result.reason
    # In a node (enable() ran): one warning per process, then info lines; nothing raises.
    monkeypatch.setattr(realtime, "_enabled", True)
    monkeypatch.setattr(realtime, "_warned", False)
    log = _Logger()
    _in_thread(lambda: realtime.realtime_thread(50, "sim_loop thread", log))
    _in_thread(lambda: realtime.realtime_thread(40, "inference thread", log))
    assert [level for level, _ in log.lines] == ["warning", "info"]
    assert log.lines[0][1].startswith("sim_loop thread stays on the normal scheduler (SCHED_OTHER): not permitted")


@pytest.mark.unit
def test_realtime_thread_does_nothing_outside_the_executables_and_with_tuning_off(monkeypatch):
    monkeypatch.setattr(realtime, "_enabled", False)
    out = _in_thread(lambda: realtime.realtime_thread(50, "x", _Logger()))
    assert out["result"] is None and out["seen"] == (os.SCHED_OTHER, 0)
    monkeypatch.setenv("ARM_ACT_REALTIME_TUNING", "0")
    switch = sys.getswitchinterval()
    realtime.enable()
    assert not realtime.enabled() and sys.getswitchinterval() == switch


@pytest.mark.unit
def test_settle_times_every_garbage_collection_after_it(monkeypatch):
    import gc

    monkeypatch.setattr(realtime, "_enabled", True)
    monkeypatch.setattr(realtime, "_settled", False)
    monkeypatch.setattr(realtime, "_gc_pauses", {"count": 0, "total_ms": 0.0, "max_ms": 0.0, "full": 0,
                                                 "full_max_ms": 0.0})
    try:
        realtime.settle()
        assert realtime.gc_pauses()["count"] == 0
        junk = [[i] for i in range(200_000)]  # something for the collection to walk
        gc.collect()
        del junk
        gc.collect()
        pauses = realtime.gc_pauses()
        assert pauses["count"] >= 2 and 0.0 < pauses["max_ms"] <= pauses["total_ms"]
        assert pauses["full"] >= 2 and 0.0 < pauses["full_max_ms"] <= pauses["max_ms"]  # gc.collect() is full
        realtime.settle()  # once per process: no second callback
        assert gc.callbacks.count(realtime._time_collection) == 1
    finally:
        while realtime._time_collection in gc.callbacks:
            gc.callbacks.remove(realtime._time_collection)
        gc.unfreeze()


@pytest.mark.unit
def test_lock_memory_locks_the_process_pages():
    # In a child: mlockall(MCL_FUTURE) would pin everything pytest maps from then on.
    code = ("from arm_act.common import realtime; ok, why = realtime.lock_memory(); "
            "lck = [l for l in open('/proc/self/smaps_rollup') if l.startswith('Locked')][0].split()[1]; "
            "print(ok, int(lck), why)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    ok, locked, *why = out.stdout.split(maxsplit=2)
    if ok != "True":
        pytest.skip(f"mlockall not permitted here: {' '.join(why)}")
    assert int(locked) > 1000, out.stdout  # kB locked: the interpreter's own pages at least


@pytest.mark.unit
@given(limit=st.integers(min_value=0, max_value=2**48), cap_eff=st.integers(min_value=0, max_value=2**41 - 1))
@settings(max_examples=200, deadline=None)
def test_memlock_refusal_only_where_the_limit_is_finite_and_unprivileged(limit, cap_eff):
    import resource
    why = realtime.memlock_refusal(limit, cap_eff)
    privileged = bool(cap_eff & (1 << realtime.CAP_IPC_LOCK))
    assert (why == "") == privileged, why
    if why:
        assert "memlock limit" in why and "CAP_IPC_LOCK" in why
    assert realtime.memlock_refusal(resource.RLIM_INFINITY, cap_eff) == ""


@pytest.mark.unit
def test_lock_memory_refuses_an_unprivileged_finite_limit_in_a_real_process():
    # As nobody, without capabilities, with a 64 KiB memlock limit: mlockall(MCL_FUTURE) would
    # be allowed for the pages mapped now and make later allocations fail; lock_memory says no.
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to start an unprivileged child")
    closed = _closed_to_others(ROOT, Path(sys.prefix))
    if closed:
        pytest.skip(f"the unprivileged child cannot reach the code: {closed} is not open to others")
    code = ("import resource; resource.setrlimit(resource.RLIMIT_MEMLOCK, (65536, 65536)); "
            "from arm_act.common import realtime; ok, why = realtime.lock_memory(); "
            "lck = [l for l in open('/proc/self/smaps_rollup') if l.startswith('Locked')][0].split()[1]; "
            "big = bytearray(64 << 20); print(ok, int(lck), why)")
    out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                          sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    ok, locked, why = out.stdout.split(maxsplit=2)
    assert ok == "False" and int(locked) == 0, out.stdout
    assert "memlock limit is 0.0625 MiB" in why and "CAP_IPC_LOCK" in why, why


def _closed_to_others(*paths: Path) -> Path | None:
    """The first directory on the way to any of `paths` that users other than the owner
    cannot enter (a clone in a 0700 temporary directory), or None."""
    for path in paths:
        for d in [*reversed(path.resolve().parents), path.resolve()]:
            if not d.stat().st_mode & stat.S_IXOTH:
                return d
    return None


@pytest.mark.unit
def test_lock_process_memory_warns_once_and_carries_on_when_refused(monkeypatch):
    calls = []

    def refuse():
        calls.append(1)
        return False, "mlockall failed: Cannot allocate memory (raise ulimit -l / limits.conf memlock, ...)"
    monkeypatch.setattr(realtime, "lock_memory", refuse)
    monkeypatch.setattr(realtime, "_memory_locked", False)
    monkeypatch.setattr(realtime, "_enabled", False)
    assert realtime.lock_process_memory(_Logger()) is None and not calls  # outside the executables: nothing
    monkeypatch.setattr(realtime, "_enabled", True)
    log = _Logger()
    assert realtime.lock_process_memory(log) is False
    assert log.lines == [("warning", "lock_memory: mlockall failed: Cannot allocate memory (raise ulimit -l / "
                                     "limits.conf memlock, ...); the process carries on with its memory unlocked")]
    assert not realtime.memory_locked()
    monkeypatch.setattr(realtime, "lock_memory", lambda: (True, ""))
    log = _Logger()
    assert realtime.lock_process_memory(log) is True and realtime.memory_locked()
    assert log.lines == [("info", "process memory locked (mlockall MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)")]
    assert realtime.lock_process_memory(log) is True and len(log.lines) == 1  # once per process


def _locked_kb(pid: int) -> int:
    """Resident locked memory of a process, kB (smaps_rollup's Locked)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Locked:"):
            return int(line.split()[1])
    raise AssertionError(f"no Locked in /proc/{pid}/smaps_rollup")


# ---------------------------------------------------------------- the node executables
def _threads(pid: int) -> dict[str, tuple[int, int]]:
    """comm -> (policy, rt_priority) of every thread of a process, from /proc."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            text = (task / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        out["main" if task.name == str(pid) else comm] = (int(fields[38]), int(fields[37]))
    return out


class _Node:
    """An executable as launch_ros starts it, its output in a file."""

    def __init__(self, tmp: Path, label: str, executable: str, config: str, values: dict, env: dict):
        from arm_act.common.paths import config_file

        params = tmp / f"{label}.yaml"
        params.write_text("/**:\n  ros__parameters:\n" + "".join(f"    {k}: {v}\n" for k, v in values.items()))
        self.log = tmp / f"{label}.log"
        self.name = f"{executable}_{label}"
        command = [str(Path(sys.executable).parent / executable), "--ros-args", "-r", f"__node:={self.name}",
                   "--params-file", str(config_file(config)), "--params-file", str(params)]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(command, env=env, cwd="/", stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _wait_for(condition, timeout: float, what: str, nodes) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    logs = "\n".join(f"--- {n.log.name}:\n{n.text()[-1500:]}" for n in nodes)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{logs}")


def _env(context, **extra) -> dict:
    env = {**os.environ, "ROS_DOMAIN_ID": str(context.get_domain_id()), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
           "PYTHONPATH": str(ROOT), **extra}
    env.pop("ARM_ACT_REALTIME_TUNING", None)
    env.update(extra)
    return env


def _fifo_permitted() -> None:
    out = _in_thread(lambda: realtime.set_thread_priority(1))
    if not out["result"].fifo:
        pytest.skip(f"SCHED_FIFO not permitted here: {out['result'].reason}")


@pytest.mark.ros
def test_sim_node_puts_its_sim_loop_on_sched_fifo_as_launch_starts_it(ros_context, tmp_path):
    _fifo_permitted()
    env = _env(ros_context)
    nodes = {
        "rt": _Node(tmp_path, "rt", "sim_node", "sim.yaml", {"thread_priority": 42}, env),
        "zero": _Node(tmp_path, "zero", "sim_node", "sim.yaml", {"thread_priority": 0}, env),
        "untuned": _Node(tmp_path, "untuned", "sim_node", "sim.yaml", {"seed": 0},
                         _env(ros_context, ARM_ACT_REALTIME_TUNING="0")),
        "bad": _Node(tmp_path, "bad", "sim_node", "sim.yaml", {"thread_priority": 120}, env),
        "lockstep": _Node(tmp_path, "lockstep", "sim_node", "sim.yaml", {"mode": "lockstep", "lock_memory": "true"},
                          env),
        "unlocked": _Node(tmp_path, "unlocked", "sim_node", "sim.yaml", {"lock_memory": "false"}, env),
    }
    try:
        # Each sim_loop logs "waiting for a controller" right after its scheduling is set.
        for label in ("rt", "zero", "untuned", "lockstep", "unlocked"):
            _wait_for(lambda n=nodes[label]: "waiting for a controller" in n.text(), 60,
                      f"sim_node ({label}) to start", nodes.values())
        # lock_memory (default on in realtime): every page the process touched stays in RAM,
        # PyBullet and rclpy included; lockstep has no deadline and untuned turns every
        # process setting off, so nothing is locked there, nor where the parameter says false.
        assert "process memory locked" in nodes["rt"].text()
        assert _locked_kb(nodes["rt"].proc.pid) > 20_000  # resident pages it touched (~70 MB here)
        for label in ("unlocked", "lockstep", "untuned"):
            assert _locked_kb(nodes[label].proc.pid) == 0, label
            assert "process memory locked" not in nodes[label].text(), label
        rt = _threads(nodes["rt"].proc.pid)
        assert rt["sim_loop"] == (os.SCHED_FIFO, 42)
        assert rt["main"] == (os.SCHED_FIFO, 41)  # the executor thread (command callbacks), below the tick
        reception = {c: v for c, v in rt.items() if c.startswith(("dds.shm.", "dds.udp.")) and c != "dds.shm.wdog"}
        assert reception and set(reception.values()) == {(os.SCHED_FIFO, 42)}, rt
        assert not any(c.startswith("dds.shm") for c in rt), rt  # UDP only (arm_act/ros/transport.py)
        assert "sim_loop thread on SCHED_FIFO priority 42" in nodes["rt"].text()
        assert "executor thread on SCHED_FIFO priority 41" in nodes["rt"].text()
        assert all(policy == os.SCHED_OTHER for policy, _ in _threads(nodes["zero"].proc.pid).values())
        assert "sim_loop thread on the normal scheduler (SCHED_OTHER)" in nodes["zero"].text()
        # Lockstep has no wall-clock deadline: its loop runs flat out, so not on SCHED_FIFO.
        assert all(policy == os.SCHED_OTHER for policy, _ in _threads(nodes["lockstep"].proc.pid).values())
        assert "no wall-clock deadline" in nodes["lockstep"].text()
        assert all(policy == os.SCHED_OTHER for policy, _ in _threads(nodes["untuned"].proc.pid).values())
        assert "SCHED_FIFO" not in nodes["untuned"].text()
        assert nodes["bad"].proc.wait(timeout=60) == 1
        assert "thread_priority out of range" in nodes["bad"].text() and "Max: 99" in nodes["bad"].text()
    finally:
        for node in nodes.values():
            node.stop()
    for label in ("rt", "zero", "untuned", "lockstep", "unlocked"):
        assert nodes[label].proc.returncode == 0, nodes[label].text()[-2000:]


def _configure(context, names: list[str]) -> None:
    """What launch's ChangeState event does: the configure transition over lifecycle_msgs."""
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    node = Node("realtime_test_launcher", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        for name in names:
            client = node.create_client(ChangeState, f"/{name}/change_state")
            assert client.wait_for_service(timeout_sec=30), f"no /{name}/change_state"
            future = client.call_async(ChangeState.Request(transition=Transition(id=Transition.TRANSITION_CONFIGURE)))
            executor.spin_until_future_complete(future, timeout_sec=60)
            assert future.done() and future.result().success, f"{name}: configure failed"
    finally:
        executor.shutdown()
        node.destroy_node()


@pytest.mark.ros
def test_policy_node_puts_its_control_tick_on_sched_fifo_above_inference(ros_context, tmp_path):
    _fifo_permitted()
    env = _env(ros_context)
    managed = {"autostart": "false"}  # as launch runs it: configured by a lifecycle event, after start-up
    nodes = {
        "rt": _Node(tmp_path, "rt", "policy_node", "policy.yaml",
                    {**managed, "thread_priority": 45, "inference_thread_priority": 0}, env),
        "default": _Node(tmp_path, "default", "policy_node", "policy.yaml", managed, env),
        "zero": _Node(tmp_path, "zero", "policy_node", "policy.yaml", {"thread_priority": 0}, env),
        "bad": _Node(tmp_path, "bad", "policy_node", "policy.yaml",
                     {"thread_priority": 20, "inference_thread_priority": 30}, env),
    }
    try:
        for label in ("rt", "default"):
            _wait_for(lambda n=nodes[label]: "control tick (executor thread)" in n.text(), 90,
                      f"policy_node ({label}) to start", nodes.values())
        # Unconfigured: the executor thread is already real-time when configure starts the worker.
        assert _threads(nodes["default"].proc.pid)["main"] == (os.SCHED_FIFO, 50)
        _configure(ros_context, [nodes["rt"].name, nodes["default"].name])
        for label in ("rt", "default", "zero"):
            _wait_for(lambda n=nodes[label]: "control tick (executor thread)" in n.text()
                      and "inference thread" in n.text(), 90, f"policy_node ({label}) to configure", nodes.values())
        rt = _threads(nodes["rt"].proc.pid)
        # inference_thread_priority 0: the worker does not keep the FIFO 45 it inherits from the
        # executor thread that configured the node.
        assert rt["main"] == (os.SCHED_FIFO, 45) and rt["inference"] == (os.SCHED_OTHER, 0)
        assert "inference thread on the normal scheduler" in nodes["rt"].text()
        default = _threads(nodes["default"].proc.pid)
        # The defaults: the tick at 50, the DDS reception threads with it, inference 10 below.
        assert default["main"] == (os.SCHED_FIFO, 50) and default["inference"] == (os.SCHED_FIFO, 40)
        reception = {v for c, v in default.items() if c.startswith("dds.udp.")}
        assert reception == {(os.SCHED_FIFO, 50)}, default
        assert "control tick (executor thread) on SCHED_FIFO priority 50" in nodes["default"].text()
        assert "inference thread on SCHED_FIFO priority 40" in nodes["default"].text()
        assert all(policy == os.SCHED_OTHER for policy, _ in _threads(nodes["zero"].proc.pid).values())
        assert nodes["bad"].proc.wait(timeout=60) == 1
        assert "inference_thread_priority 30 must be 0 or below thread_priority 20" in nodes["bad"].text()
    finally:
        for node in nodes.values():
            node.stop()
    for label in ("rt", "default", "zero"):
        assert nodes[label].proc.returncode == 0, nodes[label].text()[-2000:]


@pytest.mark.unit
def test_the_bench_records_which_threads_are_on_sched_fifo():
    from arm_act.bench.over_dds import sched_fifo_threads

    def look():
        realtime.name_os_thread("rt_probe_test")
        scheduling = realtime.set_thread_priority(33)
        return scheduling, sched_fifo_threads({"this": os.getpid()})["this"]

    scheduling, seen = _in_thread(look)["result"]
    if not scheduling.fifo:
        pytest.skip(f"SCHED_FIFO not permitted here: {scheduling.reason}")
    assert seen == {f"rt_probe_test[{scheduling.tid}]": 33}  # that thread, and no other of this process
    assert sched_fifo_threads({"this": os.getpid()})["this"] == {}  # it has ended
