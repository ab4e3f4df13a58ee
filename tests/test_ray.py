"""`collect --ray` and `eval --ray` on a local Ray instance with 2 CPUs: the same seeds give
the same bags (message for message, and byte for byte) and the same episode records as
local runs; failed tasks are retried once and reported; Ctrl-C cancels the tasks."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from rosbags.highlevel import AnyReader

from arm_act.cli import main as cli
from arm_act.common.ray_pool import RayPoolError, TaskReport, ray_session, run_tasks

pytestmark = pytest.mark.e2e

SHIPPED = Path(__file__).resolve().parents[1] / "checkpoints" / "default"
ARGS = ["--blocks", "2-3", "--seed", "7", "--camera-rate", "2", "--json"]  # 2 Hz: the test is the pool, not the images


@pytest.fixture(scope="module")
def local_ray():
    """One Ray instance for the module (starting one takes ~10 s here); ray_session, used by
    collect and eval, joins it instead of starting its own."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def messages(bag: Path) -> list[tuple[str, int, bytes]]:
    with AnyReader([bag]) as reader:
        return [(c.topic, timestamp, bytes(raw)) for c, timestamp, raw in reader.messages()]


def test_ray_collection_gives_the_bags_of_a_local_run(local_ray, tmp_path, capsys):
    assert cli.main(["collect", "--episodes", "2", "--ray", "local", "--out", str(tmp_path / "ray"), *ARGS]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ray"] == {"address": "local", "retried": {}, "failed": {}}
    assert cli.main(["collect", "--episodes", "2", "--workers", "1", "--out", str(tmp_path / "local"), *ARGS]) == 0
    local = json.loads(capsys.readouterr().out)
    strip = [{k: v for k, v in r.items() if k != "bag"} for r in summary["episodes_detail"]]
    assert strip == [{k: v for k, v in r.items() if k != "bag"} for r in local["episodes_detail"]]
    assert [Path(r["bag"]).parent for r in summary["episodes_detail"]] == [tmp_path / "ray"] * 2
    for name in ("episode_7", "episode_8"):
        ray_bag, local_bag = tmp_path / "ray" / name, tmp_path / "local" / name
        got = messages(ray_bag)
        assert len(got) > 100 and got == messages(local_bag)  # payloads and timestamps, read back
        assert sorted(p.name for p in ray_bag.iterdir()) == sorted(p.name for p in local_bag.iterdir())
        for path in local_bag.iterdir():
            assert (ray_bag / path.name).read_bytes() == path.read_bytes(), path.name


def test_ray_evaluation_gives_the_records_of_a_local_run(local_ray, tmp_path, capsys):
    args = ["eval", "--policy", str(SHIPPED), "--episodes", "2", "--seed", "100000", "--threads", "1",
            "--latency-ticks", "1", "--json"]
    assert cli.main([*args, "--ray", "local", "--bags", str(tmp_path / "ray_bags")]) == 0
    on_ray = json.loads(capsys.readouterr().out)
    assert cli.main([*args, "--bags", str(tmp_path / "local_bags")]) == 0
    local = json.loads(capsys.readouterr().out)
    assert on_ray["results"] == local["results"] and len(local["results"]) == 2
    assert on_ray["policy"] == local["policy"] and on_ray["ray"]["failed"] == {}
    names = sorted(p.name for p in (tmp_path / "local_bags").iterdir())
    assert names and names == sorted(p.name for p in (tmp_path / "ray_bags").iterdir())
    for name in names:
        assert messages(tmp_path / "ray_bags" / name) == messages(tmp_path / "local_bags" / name)


def test_a_failed_task_is_retried_once_and_reported(local_ray, tmp_path):
    marker = tmp_path / "failed_once"

    def flaky(item):  # a closure: Ray ships it by value to its worker processes
        if item == 1 and not marker.exists():
            marker.write_text("x")
            raise RuntimeError("simulated failure")
        return item * 10

    report = TaskReport()
    with ray_session("local"):
        assert run_tasks(flaky, [0, 1, 2], report=report) == [0, 10, 20]
    assert list(report.retried) == [1] and "simulated failure" in report.retried[1] and report.failed == {}

    def broken(item):
        if item == 0:
            raise ValueError("always fails")
        return item

    report = TaskReport()
    with pytest.raises(RayPoolError, match=r"task 0 failed twice .*always fails"):
        run_tasks(broken, [0, 1], report=report)
    assert list(report.failed) == [0]


def test_ctrl_c_cancels_the_tasks(local_ray):
    def slow(item):
        import time as clock

        if item > 0:
            clock.sleep(120)
        return item

    def interrupt(_index, _result):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_tasks(slow, [0, 1, 2], on_result=interrupt)
    # Both CPUs were busy with sleeping tasks; cancelled, they free them for the next run.
    started = time.monotonic()
    assert run_tasks(lambda item: item + 1, [1, 2]) == [2, 3]
    assert time.monotonic() - started < 60
