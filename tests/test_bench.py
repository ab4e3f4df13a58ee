"""`arm-act bench --quick --json` end to end with a tiny checkpoint (every field present with
a sane type; no timing assertions: timings depend on the machine), and the analysis of
the DDS probe's records on synthetic arrival times."""
import json
import math
import os
import threading

import numpy as np
import pytest
import torch

from arm_act.bench import over_dds as bench_ros
from arm_act.bench import suite as bench
from arm_act.cli import main as cli
from arm_act.policy.checkpoint import save_checkpoint
from arm_act.policy.config import PolicyConfig
from arm_act.policy.model import ACTPolicy
from arm_act.policy.normalizer import Normalizer

POSITIVE = ("matmul_peak_gflops", "inference_ms_p50", "inference_ms_p99", "inference_gflops",
            "inference_achieved_gflops_per_s", "inference_efficiency", "inference_torch_ms_p50",
            "baseline_inference_ms_p50", "baseline_ratio", "peer_inference_ms_p50", "peer_ratio",
            "predict_chunk_ms_p50",
            "render_pair_ms_p50", "render_pair_ms_p99", "loop_rtf", "loop_sim_s", "loop_wall_s",
            "control_period_p50_ms", "control_period_p99_ms", "control_period_wall_p50_ms",
            "control_period_wall_p99_ms", "control_period_sim_p50_ms", "control_period_sim_p99_ms",
            "obs_to_command_ms_p50", "obs_to_command_ms_p99", "ros_seconds", "ros_rtf",
            "ros_node_inference_ms_p50")
COUNTS = ("missed_ticks", "missed_ticks_wall", "missed_ticks_sim", "control_periods",
          "obs_to_command_pairs", "inference_trials")


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    config = PolicyConfig(width=32, heads=4, encoder_layers=1, chunk_size=10, dropout=0.0)
    normalizer = Normalizer(np.zeros(9), np.ones(9), np.zeros(8), np.full(8, 0.3))
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", ACTPolicy(config), normalizer)


@pytest.mark.e2e
def test_quick_bench_json_has_every_field(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "bench.json"
    status = cli.main(["bench", "--quick", "--json", "--checkpoint", str(tiny_checkpoint),
                       "--threads", "1", "--ros-seconds", "4", "--out", str(out)])
    assert status == 0
    printed = json.loads(capsys.readouterr().out)  # stdout holds nothing but the JSON
    assert json.loads(out.read_text()) == printed
    for key in POSITIVE:
        assert isinstance(printed[key], float) and math.isfinite(printed[key]) and printed[key] > 0, key
    for key in COUNTS:
        assert isinstance(printed[key], int) and printed[key] >= 0, key
    assert printed["control_periods"] > 0 and printed["obs_to_command_pairs"] > 0
    # The host's steal, read every 50 ms of the DDS run, set beside its late periods.
    assert printed["late_periods_sampled"] >= printed["late_periods_with_steal"] >= 0
    assert 0.0 <= printed["periods_with_steal_share"] <= 1.0 and printed["steal_ms_mean_period"] >= 0.0
    # Read with it: each process's minor faults (and DAMON's CPU where the kernel runs it).
    counters = printed["late_period_counters"]
    for name in ("sim_node", "policy_node", "probe"):
        c = counters[f"minor_faults:{name}"]
        assert 0 <= c["late_with"] <= c["late_sampled"] and 0.0 <= c["all_share"] <= 1.0, (name, c)
    # Both nodes' garbage collections since they were ready, from their diagnostics, and the
    # memory they locked (lock_memory is on by default; as root it is always permitted).
    assert set(printed["ros_node_gc"]) == {"sim_node", "policy_node"}
    assert all(v["pauses"] >= 0 and 0.0 <= v["max_ms"] < 1000 for v in printed["ros_node_gc"].values())
    loop = printed["ros_sim_loop"]  # sim_node's own timing: a physics step and a render happened
    assert loop["step_max_ms"] > 0 and loop["render_max_ms"] > 0 and loop["loop_late_max_ms"] >= 0
    assert loop["start_render_max_ms"] > 0 and loop["loop_wake_late_max_ms"] >= 0  # each episode starts with one
    assert loop["loop_overruns"] >= 0 and loop["loop_skipped_ms"] >= 0
    assert len(loop["late"]) <= min(12, loop["loop_late_events"])  # the latest late publications, explained
    assert all(e["work_ms"] is None or e["work_ms"] >= 0 for e in loop["late"]), loop["late"]
    answers = printed["ros_policy_answers"]  # policy_node timed its answers to the ticks, in parts
    assert answers["answers_timed"] > 0 and answers["answer_act_max_ms"] >= 0
    assert answers["answer_joint_after_clock_max_ms"] >= 0 and len(answers["late"]) <= answers["answers_late"]
    assert all(e["monotonic_s"] > 0 and "clock_to_callback_ms" in e for e in answers["late"]), answers["late"]
    locked = printed["ros_locked_memory_mb"]
    assert locked["probe"] == 0.0 and (os.geteuid() != 0 or min(locked["sim_node"], locked["policy_node"]) > 10)
    assert printed["inference_backend"] in ("torch", "onnx")
    # The peer is reported in the memory layout that was faster for it.
    layouts = printed["peer_layouts_ms_p50"]
    assert set(layouts) == {"contiguous", "channels_last"} and printed["peer_layout"] in layouts
    assert printed["peer_inference_ms_p50"] == layouts[printed["peer_layout"]] == min(layouts.values())
    assert printed["loop_backend"] == printed["inference_backend"] == printed["ros_backend"]
    # onnxruntime is a pinned requirement: the ONNX figure is measured, not skipped.
    assert isinstance(printed["inference_onnx_ms_p50"], float), printed["onnx_check"]
    assert printed["loop_camera_rate_hz"] == 25 and printed["ros_camera_rate_hz"] >= 1
    assert printed["render_size"] == "96x96" and printed["render_cameras"] == 2
    assert printed["quick"] is True
    machine = printed["machine"]
    for key in ("cpu_model", "torch", "platform"):
        assert isinstance(machine[key], str) and machine[key], key
    assert machine["threads"] == 1 and machine["logical_cpus"] >= 1
    policy = printed["policy"]
    assert policy["random_weights"] is False and policy["checkpoint"] == str(tiny_checkpoint)
    assert policy["tokens"] == 81 and policy["chunk_size"] == 10


@pytest.mark.slow
@pytest.mark.unit
def test_table_output_and_no_ros(tiny_checkpoint, capsys):
    assert cli.main(["bench", "--quick", "--no-ros", "--backend", "torch",
                     "--checkpoint", str(tiny_checkpoint), "--threads", "1"]) == 0
    text = capsys.readouterr().out
    assert "matmul peak" in text and "baseline / ours" in text and "over DDS" in text


@pytest.mark.slow
@pytest.mark.unit
def test_compare_times_another_checkpoint_in_the_same_trials(tiny_checkpoint, tmp_path, capsys):
    torch.manual_seed(1)
    wider = PolicyConfig(width=64, heads=4, encoder_layers=2, chunk_size=10, dropout=0.0, max_instruction_tokens=15)
    other = save_checkpoint(tmp_path / "wider", ACTPolicy(wider), Normalizer(np.zeros(9), np.ones(9), np.zeros(8),
                                                                             np.ones(8)))
    assert cli.main(["bench", "--quick", "--no-ros", "--backend", "torch", "--checkpoint", str(tiny_checkpoint),
                     "--compare", str(other), "--threads", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["compare_checkpoint"] == str(other) and report["compare_tokens"] == 88
    assert report["compare_inference_ms_p50"] > 0
    assert report["compare_ratio"] == report["compare_inference_ms_p50"] / report["inference_torch_ms_p50"]
    assert cli.main(["bench", "--quick", "--compare", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "--compare" in err and "is not a directory" in err


@pytest.mark.unit
def test_bad_checkpoint_is_one_line_error(tmp_path, capsys):
    assert cli.main(["bench", "--quick", "--checkpoint", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err


@pytest.mark.unit
def test_random_weights_when_nothing_is_shipped(tmp_path):
    policy = bench.load_policy(None, tmp_path / "no_checkpoint", tmp_path)
    assert policy.random_weights and "random weights" in policy.note
    assert policy.model.config == PolicyConfig()
    assert (policy.checkpoint / "model.safetensors").is_file()  # the node loads it too


@pytest.mark.unit
def test_loop_camera_rate():
    assert bench.loop_camera_rate(50) == 25
    assert bench.loop_camera_rate(60) == 15
    assert bench.loop_camera_rate(30) == 15


class FakeProbe:
    cameras = ("front", "wrist")

    def __init__(self):
        self.lock = threading.Lock()
        self.commands, self.pairs, self.chunks = [], {}, {}
        self.clock_samples, self.inference_ms = [], []


@pytest.mark.unit
def test_analysis_counts_missing_ticks_and_latency():
    probe = FakeProbe()
    wall, sim = 10.0, 0
    for i in range(50):  # one running episode, a 20 ms timer with one 60 ms hole (2 missed)
        step = 0.06 if i == 20 else 0.02
        wall, sim = wall + step, sim + int(step * 1e9)
        probe.commands.append((wall, sim, 0))
    probe.commands.append((wall + 1.0, sim + 10**9, None))  # between episodes: not a period
    probe.clock_samples = [(10.0, 0), (11.0, 10**9)]
    # A pair complete at 10.100 s, its chunk at 10.110 s; the next command arrives at
    # the first 20 ms tick after that.
    stamp = bench_ros._key(5 * 10**8)
    probe.pairs[stamp] = {"front": 10.095, "wrist": 10.100}
    probe.chunks[stamp] = 10.110
    probe.pairs[stamp + 1] = {"front": 10.2}  # incomplete pair: ignored
    result = bench_ros.analyse(probe, start=10.0, end=12.0)
    assert result["control_periods"] == 49
    assert result["missed_ticks_wall"] == result["missed_ticks_sim"] == result["missed_ticks"] == 2
    assert result["control_period_wall_p50_ms"] == pytest.approx(20.0)
    first_after = min(w for w, _, _ in probe.commands if w > 10.110)
    assert result["obs_to_command_pairs"] == 1
    assert result["obs_to_command_ms_p50"] == pytest.approx((first_after - 10.100) * 1e3)
    assert result["ros_rtf"] == pytest.approx(1.0)
