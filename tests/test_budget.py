"""FLOP and token accounting against the real model, and the `arm-act budget` command."""

import json

import numpy as np
import pytest
import torch

from arm_act.cli import main as cli
from arm_act.policy.budget import (
    budget_report,
    count_model_flops,
    count_parameters,
    decoder_layer_flops,
    dummy_inputs,
    encoder_layer_flops,
    flop_counts,
    format_report,
    measure_latency,
    measure_matmul_gflops,
    token_counts,
    torch_threads,
)
from arm_act.policy.checkpoint import save_checkpoint
from arm_act.policy.config import PolicyConfig
from arm_act.policy.model import ACTPolicy
from arm_act.policy.normalizer import Normalizer

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _one_thread():
    with torch_threads(1):  # small tensors; see test_policy_model.py
        yield


def small_config(**overrides) -> PolicyConfig:
    base = dict(image_size=32, patch_size=8, width=32, heads=4, encoder_layers=2,
                decoder_layers=1, chunk_size=6, dropout=0.0, latent_dim=4, cvae_layers=1)
    return PolicyConfig(**{**base, **overrides})


def test_lesson_formulas():
    n, d = 81, 256
    enc = encoder_layer_flops(n, d)
    assert (enc["projections"], enc["mlp"], enc["attention"]) == (8 * n * d * d,
                                                                  16 * n * d * d,
                                                                  4 * n * n * d)
    assert enc["attention_share"] == pytest.approx(n / (6 * d + n))
    dec = decoder_layer_flops(50, n, d)
    assert dec["self_attention"] == 8 * 50 * d * d + 4 * 50 * 50 * d
    assert dec["cross_attention"] == 4 * 50 * d * d + 4 * n * d * d + 4 * 50 * n * d
    assert dec["total"] == dec["self_attention"] + dec["cross_attention"] + 16 * 50 * d * d


def test_default_token_counts():
    tok = token_counts(PolicyConfig())
    assert tok == {"per_camera": 36, "cameras": 2, "image": 72, "state": 1, "instruction": 8,
                   "latent": 0, "encoder": 81, "action_queries": 50}


@pytest.mark.parametrize("config", [
    PolicyConfig(),
    small_config(use_cvae=True, decoder_layers=2, decoder_rope=True),
    small_config(pre_ln=False, cameras=("front",), mlp_ratio=2),
    PolicyConfig(width=128, heads=4, stem_channels=(8, 16)),
], ids=["default", "cvae-2dec-rope", "postln-1cam", "conv-stem"])
def test_analytic_flops_match_the_flop_counter_on_the_real_model(config):
    torch.manual_seed(0)
    model = ACTPolicy(config)
    inputs = dummy_inputs(config, generator=torch.Generator().manual_seed(0))
    analytic = flop_counts(config)["inference"]
    for need_weights in (False, True):  # the fused and the explicit attention paths
        counted = count_model_flops(model, inputs, need_weights=need_weights)
        assert abs(counted - analytic) <= 0.05 * counted, (need_weights, counted, analytic)
    assert count_parameters(config) == model.num_parameters()


def test_training_flops_include_the_cvae_encoder():
    plain, cvae = small_config(), small_config(use_cvae=True)
    assert flop_counts(plain)["training_per_sample"] == 3 * flop_counts(plain)["inference"]
    assert flop_counts(cvae)["training_per_sample"] > 3 * flop_counts(cvae)["inference"]


def test_measurements_are_quick_and_positive():
    assert measure_matmul_gflops(threads=1, size=64, seconds=0.02) > 0
    cfg = small_config()
    timing = measure_latency(ACTPolicy(cfg), dummy_inputs(cfg), threads=1, repeats=3, warmup=1)
    assert 0 < timing["median_ms"] <= timing["p99_ms"]
    report = budget_report(cfg, threads=1, matmul_gflops=50.0, measure=True, repeats=3)
    lat = report["latency"]
    assert lat["predicted_ms"] == pytest.approx(flop_counts(cfg)["inference"] / 50e9 * 1e3)
    assert lat["measured_median_ms"] > 0 and 0 < lat["share_of_matmul_peak"]
    assert "measured (random weights" in format_report(report)


def _run(capsys, *argv):
    code = cli.main(["budget", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_json_and_text(capsys):
    code, out, _ = _run(capsys, "--image", "128", "--patch", "16", "--cameras", "2",
                        "--width", "256", "--layers", "4", "--matmul-gflops", "100", "--json")
    assert code == 0
    report = json.loads(out)
    assert {"tokens", "parameters", "flops"} <= set(report)
    assert report["tokens"]["per_camera"] == 64 and report["tokens"]["encoder"] == 137
    assert report["config"]["cameras"] == ["front", "wrist"]
    cfg = PolicyConfig(image_size=128)
    assert report["flops"]["inference"] == flop_counts(cfg)["inference"]
    assert report["parameters"] == count_parameters(cfg)
    code, out, _ = _run(capsys, "--cameras", "3", "--matmul-gflops", "100")
    assert code == 0
    assert "108 image" in out and "attention share" in out and "camera period" in out


def test_cli_reads_a_checkpoint(capsys, tmp_path):
    cfg = small_config(use_cvae=True)
    norm = Normalizer(np.zeros(9), np.ones(9), np.zeros(8), np.ones(8))
    save_checkpoint(tmp_path / "ckpt", ACTPolicy(cfg), norm)
    code, out, _ = _run(capsys, "--checkpoint", str(tmp_path / "ckpt"),
                        "--matmul-gflops", "100", "--json")
    assert code == 0 and json.loads(out)["tokens"]["latent"] == 1


def test_cli_errors_are_one_line(capsys, tmp_path):
    code, out, err = _run(capsys, "--image", "100", "--matmul-gflops", "100")
    assert code == 2 and out == ""
    assert err.strip() == ("arm-act budget: error: image_size=100 must be a multiple of "
                           "patch_size=16")
    code, _, err = _run(capsys, "--checkpoint", str(tmp_path), "--width", "64")
    assert code == 2 and "drop width" in err and len(err.strip().splitlines()) == 1
    code, _, err = _run(capsys, "--checkpoint", str(tmp_path / "nowhere"))
    assert code == 2 and "config.json is missing" in err


def test_the_stem_cost_benchmark_times_every_variant_and_both_layouts(tmp_path, monkeypatch):
    """benchmarks/stem_cost.py, cut to one round of one step at batch 2: a time for every
    stem and round, and both layouts of the patch embedding, in its JSON."""
    from benchmark_scripts import load

    stem_cost = load("stem_cost")
    monkeypatch.setattr(stem_cost, "ROUNDS", 1)
    monkeypatch.setattr(stem_cost, "STEPS", 1)
    monkeypatch.setattr(stem_cost, "BATCH", 2)
    with torch_threads(1):
        assert stem_cost.main(["stem_cost.py", str(tmp_path / "out.json")]) == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert set(out["network_ms"]) == {"[]", "[8, 16]", "[16, 32]"}
    assert all(len(v) == 1 and v[0] > 0 for v in out["network_ms"].values())
    assert all(len(v) == 1 and v[0] > 0 for v in out["stem_layout_ms"].values())
    assert set(out["stem_layout_ms"]) == {"default", "channels_last"}
