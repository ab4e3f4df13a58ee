"""`arm-act report` on a synthetic bag with known periods, latencies, tracking error and jerk:
the metrics must come out as constructed; errors are one line on stderr."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, Header, String
from visualization_msgs.msg import Marker, MarkerArray

from arm_act.bags import BagWriter, live_topic_specs
from arm_act.cli import main as cli
from arm_act.eval.report import analyse_bag, jerk, segment_ids

pytestmark = pytest.mark.unit

START = 1_000_000_000  # ns; sim time of the first tick
PERIOD = 20_000_000  # 50 Hz
SKIPPED = (12, 33)  # ticks without an arm command: two 40 ms gaps
CUBIC = np.array([0.1, -0.2, 0.3, 0.05, -0.15, 0.25, 0.4])  # q_j(t) = a_j t^3: jerk 6 a_j
OFFSET = 0.01  # measured = command + 0.01 rad
JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1", "panda_finger_joint2"]


def _stamp(ns: int) -> Time:
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def _episode(state: str, time: float) -> String:
    return String(data=json.dumps({"episode": 0, "seed": 5, "n_blocks": 2, "state": state, "time": time,
                                   "instruction": "put the red block in the box", "start": START * 1e-9,
                                   "control_rate": 50, "camera_rate": 10}))


def _objects(red_xy) -> MarkerArray:
    markers = MarkerArray()
    for i, (name, ns, colour, xy, size) in enumerate([("block_red", "block", "red", red_xy, 0.04),
                                                      ("block_blue", "block", "blue", (0.3, 0.2), 0.04),
                                                      ("box", "box", "brown", (0.5, -0.27), 0.18)]):
        marker = Marker(ns=ns, id=i, type=Marker.CUBE, text=f"{name}|{colour}")
        marker.pose.position.x, marker.pose.position.y = xy
        marker.pose.position.z = 0.0 if ns == "box" else 0.03
        marker.scale.x = marker.scale.y = size
        marker.scale.z = 0.06 if ns == "box" else 0.04
        markers.markers.append(marker)
    return markers


def write_synthetic_bag(path: Path, ticks: int = 51) -> dict:
    """Arm commands every 20 ms except ticks SKIPPED, following a cubic; joint states 5 ms
    after each tick, OFFSET from the command; a front image every 5th tick stamped 15 ms
    before the tick's command; the red block ends in the box."""
    expected = {"images": 0}
    with BagWriter(path, live_topic_specs(), {"control_rate_hz": 50, "seed": 5}) as bag:
        bag.write("/episode", START, _episode("running", 0.0))
        bag.write("/task", START, String(data="put the red block in the box"))
        for k in range(ticks):
            t = START + k * PERIOD
            seconds = k * PERIOD * 1e-9
            command = CUBIC * seconds ** 3
            if k % 5 == 0 and k > 0:
                bag.write("/camera/front/image_raw", t - 15_000_000,
                          Image(header=Header(stamp=_stamp(t - 15_000_000)), height=1, width=1, encoding="rgb8",
                                step=3, data=[0, 0, 0]))
                expected["images"] += 1
            if k not in SKIPPED:
                bag.write("/arm_controller/commands", t, Float64MultiArray(data=command.tolist()))
            bag.write("/gripper_controller/commands", t, Float64MultiArray(data=[0.04]))
            if k not in SKIPPED:  # the state measured 5 ms after the command
                bag.write("/joint_states", t + 5_000_000, JointState(
                    header=Header(stamp=_stamp(t + 5_000_000)), name=JOINTS,
                    position=(command + OFFSET).tolist() + [0.039, 0.039]))
            bag.write("/objects", t, _objects((0.5, -0.26) if k == ticks - 1 else (0.4, 0.1)))
        end = START + (ticks - 1) * PERIOD
        bag.write("/episode", end, _episode("success", (ticks - 1) * PERIOD * 1e-9))
    return expected


def test_metrics_of_a_synthetic_bag(tmp_path):
    bag = tmp_path / "episode_5"
    expected = write_synthetic_bag(bag)
    metrics = analyse_bag(bag).metrics

    (episode,) = metrics["episodes"]
    assert episode["success"] is True and episode["objects_success"] is True
    assert episode["seed"] == 5 and episode["duration_s"] == pytest.approx(1.0)

    arm = metrics["arm_commands"]
    assert arm["count"] == 49 and arm["periods"] == 48
    assert arm["nominal_period_ms"] == pytest.approx(20.0)
    assert arm["period_p50_ms"] == pytest.approx(20.0)
    assert arm["period_max_ms"] == pytest.approx(40.0)
    assert arm["period_p99_ms"] == pytest.approx(40.0)  # 46 x 20 ms and 2 x 40 ms
    assert arm["late_periods"] == 2
    assert arm["mean_rate_hz"] == pytest.approx(48 / 1.0)  # 48 periods over 1 s
    gripper = metrics["gripper_commands"]
    assert gripper["count"] == 51 and gripper["late_periods"] == 0 and gripper["mean_rate_hz"] == pytest.approx(50)

    latency = metrics["image_to_command_latency"]
    assert latency["count"] == expected["images"]
    assert latency["p50_ms"] == pytest.approx(15.0) and latency["max_ms"] == pytest.approx(15.0)

    assert metrics["tracking_rms_rad"] == pytest.approx(OFFSET)
    assert metrics["tracking_max_rad"] == pytest.approx(OFFSET)
    assert metrics["gripper_tracking_rms_m"] == pytest.approx(0.001)
    # Exact for a cubic even across the two gaps (divided differences over the real times).
    assert metrics["jerk_rms"] == pytest.approx(np.sqrt(np.mean((6 * CUBIC) ** 2)), rel=1e-6)
    assert metrics["jerk_max"] == pytest.approx(6 * np.abs(CUBIC).max(), rel=1e-6)


def test_jerk_is_the_third_difference_over_dt_cubed_on_a_uniform_grid():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(20, 3))
    times = np.arange(20, dtype=np.int64) * PERIOD
    dt = PERIOD * 1e-9
    expected = np.diff(q, n=3, axis=0) / dt ** 3
    np.testing.assert_allclose(jerk(times, q, np.zeros(20, dtype=np.int64)), expected, rtol=1e-9)
    # Windows that straddle an episode boundary are dropped.
    assert jerk(times, q, segment_ids(times, [int(times[10])])).shape == (17 - 3, 3)
    # ... and so are the 3 windows around two commands logged with one stamp (they would
    # divide by zero: the report's jerk RMS was nan for such a bag); the rest is unchanged.
    repeated = times.copy()
    repeated[8] = repeated[7]
    got = jerk(repeated, q, np.zeros(20, dtype=np.int64))
    assert got.shape == (17 - 3, 3) and np.isfinite(got).all()
    np.testing.assert_allclose(got[:5], expected[:5], rtol=1e-9)  # windows 0-4 (commands 0-7)
    np.testing.assert_allclose(got[6:], expected[9:], rtol=1e-9)  # windows 9-16; window 8 holds the moved command


@pytest.mark.slow
def test_cli_writes_plots_summary_and_json(tmp_path, capsys):
    bags = tmp_path / "bags"
    write_synthetic_bag(bags / "episode_5")
    write_synthetic_bag(bags / "episode_6", ticks=21)
    out = tmp_path / "report"
    assert cli.main(["report", str(bags), "--json", "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [Path(b["bag"]).name for b in report["bags"]] == ["episode_5", "episode_6"]
    summary = report["aggregate"]
    assert summary["bags"] == 2 and summary["episodes"] == 2 and summary["success_rate"] == 1.0
    assert summary["arm_commands"]["late_periods"] == 3  # episode_6 (21 ticks) has only the gap at 12
    for name in ("000_episode_5_joints.png", "000_episode_5_periods.png", "001_episode_6_joints.png",
                 "summary.md", "report.json"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "000_episode_5_joints.png").read_bytes()[:4] == b"\x89PNG"
    assert "2/2 successful" in (out / "summary.md").read_text()

    assert cli.main(["report", str(bags / "episode_5"), "--out", str(out)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "success (1/1 episodes)" in line and "2 late" in line


def test_cli_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli.main(["report", str(tmp_path / "empty"), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a bag" in err and "Traceback" not in err

    bag = tmp_path / "cut"
    write_synthetic_bag(bag)
    mcap = bag / "cut.mcap"
    mcap.write_bytes(mcap.read_bytes()[:5000])
    assert cli.main(["report", str(bag), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "truncated .mcap" in err and "Traceback" not in err

    assert cli.main(["report", str(bag), "--allow-incomplete", "--json", "--no-plots",
                     "--out", str(tmp_path / "r")]) == 0
    (metrics,) = json.loads(capsys.readouterr().out)["bags"]
    assert metrics["complete"] is False and "truncated" in metrics["problem"]


def test_goal_changes_of_each_episode(tmp_path, capsys):
    """A new instruction accepted at 1.2 s, one refused at 0.6 s, sim_node's own at the start."""
    first, new, refused = "put the red block in the box", "stack the red block on the blue block", "fly"

    def episode(state, time, changes):
        fields = {"episode": 0, "seed": 5, "n_blocks": 2, "state": state, "time": time,
                  "instruction": new if changes else first, "start": START * 1e-9, "control_rate": 50}
        if changes:
            fields["goal_changes"] = [{"time": 1.2, "instruction": new}]
        return String(data=json.dumps(fields))

    bag = tmp_path / "episode_5"
    with BagWriter(bag, live_topic_specs(), {"control_rate_hz": 50}) as writer:
        writer.write("/episode", START, episode("running", 0.0, False))
        writer.write("/task", START, String(data=first))
        writer.write("/task", START + 600_000_000, String(data=refused))
        writer.write("/task", START + 1_195_000_000, String(data=new))
        writer.write("/episode", START + 1_200_000_000, episode("running", 1.2, True))
        writer.write("/episode", START + 3_000_000_000, episode("success", 3.0, True))
    (record,) = analyse_bag(bag).metrics["episodes"]
    assert record["first_instruction"] == first and record["instruction"] == new
    assert record["goal_changes"] == [{"time": 1.2, "instruction": new}]
    assert record["ignored_instructions"] == [{"time": pytest.approx(0.6), "instruction": refused}]
    assert cli.main(["report", str(bag), "--out", str(tmp_path / "report"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert f"-> {new!r} at 1.20 s" in out and f"ignored {refused!r} at 0.60 s" in out
    assert "## Goal changes" in (tmp_path / "report" / "summary.md").read_text()
