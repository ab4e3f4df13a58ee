"""`arm-act eval --workers N` and the process pool under it (arm_act/common/worker_pool.py):
the same seeds give the same records and bags as one process; every episode is reported as
it ends; a worker that fails to start, an episode that raises and a worker that dies each
stop the run with one line."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from rosbags.highlevel import AnyReader

from arm_act.cli import main as cli
from arm_act.common.worker_pool import WorkerError, run_in_processes
from arm_act.eval.evaluate import EvalConfig, evaluate
from arm_act.eval.in_process import PolicySettings
from tests.pool_workers import Squares

SHIPPED = Path(__file__).resolve().parents[1] / "checkpoints" / "default"


@pytest.mark.slow
@pytest.mark.unit
def test_the_pool_runs_every_item_once_in_several_processes():
    got: dict[int, tuple[int, int]] = {}
    run_in_processes(Squares, (), "square", list(range(12)), 2, lambda i, r: got.__setitem__(i, r))
    assert sorted(got) == list(range(12)) and all(got[i][0] == i * i for i in got)
    assert all(pid != os.getpid() for _, pid in got.values())
    run_in_processes(Squares, (), "square", [], 2, lambda i, r: pytest.fail("nothing to run"))
    with pytest.raises(ValueError, match="workers=0"):
        run_in_processes(Squares, (), "square", [1], 0, lambda i, r: None)


@pytest.mark.slow
@pytest.mark.unit
def test_the_pool_leaves_the_resource_tracker_nothing_to_clean_up(monkeypatch):
    # A named semaphore (a multiprocessing Queue has three) is registered with the resource
    # tracker and unregistered by a finalizer; a SIGTERM between the two made the tracker
    # print "leaked semaphore" warnings at exit (CI, arm-act collect stopped by SIGTERM).
    registered = []
    monkeypatch.setattr("multiprocessing.resource_tracker.register", lambda name, rtype: registered.append(name))
    got = []
    run_in_processes(Squares, (), "square", list(range(6)), 2, lambda i, r: got.append(i))
    assert sorted(got) == list(range(6)) and registered == []


@pytest.mark.unit
@pytest.mark.parametrize("args, message", [
    ((5, None, False), r"^5: ValueError: item 5 is bad$"),
    ((None, None, True), r"^worker start: OSError: no sim for this worker$"),
    ((None, 4, False), r"^a worker process exited with code 3 before the run was complete$"),
    ((None, None, False, 4), r"^a worker process was killed by SIGKILL before the run was complete$"),
])
@pytest.mark.slow
def test_a_failure_in_a_worker_stops_the_run_with_one_line(args, message):
    with pytest.raises(WorkerError, match=message):
        run_in_processes(Squares, args, "square", list(range(8)), 2, lambda i, r: None)


@pytest.mark.slow
@pytest.mark.unit
def test_a_worker_that_dies_just_after_a_large_result_stops_the_run():
    """Results of 4 MB, and a worker that dies on the item after one. The pool used to share
    one results queue between the workers; a worker that died while its feeder thread wrote
    left the queue's write lock taken and the run waited forever (CI hung once; the 8-item
    case above hung once in 55 runs beside two busy loops). With a pipe per worker every
    result arrives whole and the death stops the run, every time."""
    got: list = []
    for _ in range(5):
        start = time.monotonic()
        got.clear()
        with pytest.raises(WorkerError, match="^a worker process exited with code 3 before the run was complete$"):
            run_in_processes(Squares, (None, 3, False, None, True), "square", list(range(12)), 2,
                             lambda i, r: got.append((i, r)))
        assert time.monotonic() - start < 30.0
        assert all(r[0] == i * i and len(r[2]) == 4 << 20 for i, r in got)
    got.clear()
    run_in_processes(Squares, (None, None, False, None, True), "square", list(range(6)), 2,
                     lambda i, r: got.append(i))
    assert sorted(got) == list(range(6))


def _messages(bag: Path) -> list[tuple[str, int, bytes]]:
    with AnyReader([bag]) as reader:
        return [(c.topic, timestamp, bytes(raw)) for c, timestamp, raw in reader.messages()]


@pytest.mark.e2e
def test_two_workers_give_the_records_and_bags_of_one_process(tmp_path, capsys):
    args = ["eval", "--policy", str(SHIPPED), "--episodes", "3", "--seed", "100000", "--threads", "1",
            "--latency-ticks", "1", "--time-limit", "6", "--json"]
    assert cli.main([*args, "--workers", "2", "--bags", str(tmp_path / "two")]) == 0
    two = json.loads(capsys.readouterr().out)
    assert cli.main([*args, "--bags", str(tmp_path / "one")]) == 0
    one = json.loads(capsys.readouterr().out)
    assert len(one["results"]) == 3 and two["results"] == one["results"]  # in seed order, field for field
    assert [r["seed"] for r in two["results"]] == [100000, 100001, 100002]
    assert two["policy"] == one["policy"] and (two["workers"], one["workers"]) == (2, 1)
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert len(names) == 3 and names == sorted(p.name for p in (tmp_path / "two").iterdir())
    for name in names:
        assert _messages(tmp_path / "two" / name) == _messages(tmp_path / "one" / name)


@pytest.mark.e2e
def test_every_episode_is_reported_as_it_ends():
    seen: list[dict] = []
    config = EvalConfig(policy=SHIPPED, episodes=3, seed=100000, time_limit=3.0, workers=2,
                        settings=PolicySettings(threads=1, latency_ticks=1))
    summary = evaluate(config, on_record=seen.append)
    assert sorted(r["seed"] for r in seen) == [100000, 100001, 100002]
    assert sorted(seen, key=lambda r: r["seed"]) == summary["results"]


@pytest.mark.unit
@pytest.mark.parametrize("change", [{"workers": 0}, {"workers": 2, "over_ros": True},
                                    {"workers": 2, "ray": "local"}, {"workers": 2, "live": True}])
def test_workers_are_for_in_process_episodes(change):
    with pytest.raises(ValueError, match="workers="):
        EvalConfig(**change)


@pytest.mark.unit
def test_the_cli_names_bad_workers_in_one_line(capsys):
    assert cli.main(["eval", "--episodes", "1", "--workers", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["arm-act eval: error: workers=0 must be >= 1"]


CTRL_C_PARENT = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from arm_act.common.worker_pool import run_in_processes
from pool_workers import Sleeper
done = []
try:
    run_in_processes(Sleeper, (), "nap", list(range(200)), 2, lambda i, r: done.append(i) or print(i, flush=True))
except KeyboardInterrupt:
    print("interrupted after", len(done), flush=True)
    sys.exit(130)
"""


@pytest.mark.slow
@pytest.mark.unit
def test_ctrl_c_stops_the_parent_and_its_workers_without_their_tracebacks():
    import signal
    import subprocess
    import sys
    import time

    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(here.parent)])}
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_PARENT], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip().isdigit()  # the workers are running items
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "interrupted after" in out
    assert "Traceback" not in err, err[-2000:]
    time.sleep(0.5)  # exited ones may stay <defunct> until init reaps them: those are gone
    rows = subprocess.run(["ps", "-o", "stat=,pid=,args=", "-g", str(proc.pid)], capture_output=True,
                          text=True).stdout.splitlines()
    assert [r for r in rows if not r.strip().startswith("Z")] == [], f"workers left behind: {rows}"
