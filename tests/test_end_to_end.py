"""The whole pipeline through the real commands, tiny: collect 2 expert episodes as bags,
report on them, train a tiny policy for a few steps, evaluate it for one episode in process
(with a video and a rollout bag) and over ROS; and the headless demo producing its video."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arm_act.bags import bag_info
from arm_act.cli import main as cli

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    demos, ckpt = root / "demos", root / "ckpt"
    assert cli.main(["collect", "--episodes", "2", "--seed", "11", "--blocks", "2", "--out", str(demos)]) == 0
    assert cli.main([
        "train", "--data", str(demos), "--out", str(ckpt), "--cache", str(root / "cache"),
        "--config", "width=32", "heads=4", "encoder_layers=1", "chunk_size=10", "steps=4", "batch_size=4",
        "val_every=2", "checkpoint_every=2", "warmup_steps=1", "augment=false", "target_weight=1.0",
        "grounding_layouts=4",
    ]) == 0
    return root, demos, ckpt


def test_collect_report_train(pipeline, capsys):
    root, demos, ckpt = pipeline
    capsys.readouterr()
    assert cli.main(["report", str(demos), "--json", "--out", str(root / "report"), "--no-plots"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["bags"]) == 2
    assert all(e["success"] for bag in report["bags"] for e in bag["episodes"])
    for name in ("model.safetensors", "config.json", "normalization.json", "metrics.json"):
        assert (ckpt / name).is_file(), name
    metrics = json.loads((ckpt / "metrics.json").read_text())
    assert metrics["steps"] == 4
    assert metrics["final"]["val_target_cm"] > 0  # the named block's position came from the bags' objects
    assert metrics["data"]["grounding_frames"] == 4 and metrics["final"]["val_grounding_cm"] > 0


def test_takeover_round_fine_tunes_the_policy(pipeline, capsys):
    """One DAgger-style round through the real commands: the trained policy drives, the
    expert takes over, and training fine-tunes from the checkpoint on both data sets."""
    root, demos, ckpt = pipeline
    takeover, tuned = root / "takeover", root / "tuned"
    assert cli.main(["collect", "--policy", str(ckpt), "--handover", "0.2-0.4", "--episodes", "1",
                     "--seed", "300000", "--blocks", "2", "--out", str(takeover)]) == 0
    assert bag_info(takeover / "episode_300000").custom_data["expert_from_s"] != "none"
    capsys.readouterr()
    layouts = sorted((root / "cache").glob("grounding-*"))
    assert layouts
    assert cli.main([
        "train", "--data", str(demos), str(takeover), "--out", str(tuned), "--cache", str(root / "cache"),
        "--init", str(ckpt), "--config", "width=32", "heads=4", "encoder_layers=1", "chunk_size=10", "steps=2",
        "batch_size=4", "val_every=2", "checkpoint_every=2", "warmup_steps=1", "augment=false",
        "target_weight=1.0", "hold_after_end=true", "grounding_layouts=4",
    ]) == 0
    metrics = json.loads((tuned / "metrics.json").read_text())
    assert metrics["train"]["init_from"] == str(ckpt) and metrics["train"]["hold_after_end"] is True
    assert metrics["data"]["episodes"] == 3 and metrics["data"]["grounding_frames"] == 4
    # The layouts borrow poses from the expert's episodes only: the fine-tune found the first
    # training's layouts in the cache rather than rendering new ones for the takeover frames.
    assert sorted((root / "cache").glob("grounding-*")) == layouts
    assert (tuned / "normalization.json").read_text() == (ckpt / "normalization.json").read_text()


def test_eval_in_process_with_video_and_bags(pipeline, capsys):
    root, _, ckpt = pipeline
    capsys.readouterr()
    code = cli.main(["eval", "--policy", str(ckpt), "--episodes", "1", "--seed", "500", "--blocks", "2",
                     "--json", "--latency-ticks", "1", "--time-limit", "2", "--video", str(root / "video"),
                     "--bags", str(root / "bags"),
                     "--threads", "1"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 1 and result["policy"]["latency_ticks"] == 1
    # One episode: the figures follow from its record (the summary over several episodes is
    # tested in test_eval_summary.py); these check that the command reports that record.
    (episode,) = result["results"]
    assert result["successes"] == int(episode["success"]) and result["success_rate"] == result["successes"]
    assert result["ci95"] == [[0.0, 0.7935], [0.2065, 1.0]][result["successes"]]  # Wilson, n = 1
    assert isinstance(episode["lifted_named_block"], bool) and isinstance(episode["lifted_other_block"], bool)
    assert (result["lifted_named_block"], result["lifted_other_block"]) == (
        int(episode["lifted_named_block"]), int(episode["lifted_other_block"]))
    grounding = episode["target_error"]
    assert 0 < grounding["first_cm"] and 0 < grounding["median_cm"]
    assert result["target_error_first_cm_median"] == grounding["first_cm"]
    (video,) = (root / "video").glob("*.mp4")
    assert video.stat().st_size > 1000
    (bag,) = (root / "bags").iterdir()
    assert bag_info(bag).complete


def test_eval_over_ros_agrees_with_in_process(pipeline, capsys):
    _, _, ckpt = pipeline
    outcomes = {}
    for mode in ("in-process", "over-ros"):
        capsys.readouterr()
        args = ["eval", "--policy", str(ckpt), "--episodes", "1", "--seed", "501", "--blocks", "2", "--json",
                "--latency-ticks", "1", "--threads", "1", "--time-limit", "2"]
        assert cli.main(args + (["--over-ros"] if mode == "over-ros" else [])) == 0
        results = json.loads(capsys.readouterr().out)["results"]
        outcomes[mode] = [(r["seed"], r["status"], r["duration"]) for r in results]
    assert outcomes["in-process"] == outcomes["over-ros"]


def test_eval_rejects_a_directory_that_is_not_a_checkpoint(tmp_path, capsys):
    assert cli.main(["eval", "--policy", str(tmp_path), "--episodes", "1"]) == 2
    assert "error" in capsys.readouterr().err


def test_demo_headless_writes_its_video(pipeline, tmp_path):
    _, _, ckpt = pipeline
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    video = tmp_path / "demo.mp4"
    out = subprocess.run(
        [sys.executable, "-m", "arm_act.cli", "demo", "--episodes", "1", "--checkpoint", str(ckpt),
         "--video", str(video), "--domain-id", str(60 + os.getpid() % 40), "--real-time-factor", "1",
         "--time-limit", "4", "--record", str(tmp_path / "bag")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "episode   0" in out.stdout
    assert video.stat().st_size > 1000
    assert bag_info(tmp_path / "bag").complete
