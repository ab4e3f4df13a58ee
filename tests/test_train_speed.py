"""The faster training paths compute what the paths they replace computed, bit for
bit: the dropout mask without a bool tensor, the attention mask as an additive bias, the
augmentation's shift from an edge-padded copy, AdamW's multi-tensor update; and the shipped
recipe trains on 2 data-parallel processes on the CPU (config/pipeline_default.yaml)."""
from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
from test_train import FAST, TINY, episodes, weights

from arm_act.bench.train_speed import clamped_gather_shift
from arm_act.pipeline.config import load
from arm_act.pipeline.run import Pipeline, RunOptions
from arm_act.policy import dropout
from arm_act.policy import train as train_module
from arm_act.policy.attention import attention_explicit
from arm_act.policy.config import PolicyConfig
from arm_act.policy.data import _shift_edge_padded, augment_images
from arm_act.policy.train import TrainConfig, train

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("pad", [0, 1, 2, 5])
def test_edge_padded_shift_is_the_clamped_gather(pad):
    g = torch.Generator().manual_seed(pad)
    flat = torch.randint(0, 256, (12, 9, 11, 3), dtype=torch.uint8, generator=g)
    shift = torch.randint(-pad, pad + 1, (2, 12), generator=g)
    shift[:, 0] = torch.tensor([-pad, pad])  # the extremes, where the edge is replicated
    got = _shift_edge_padded(flat, shift, pad)
    assert got.shape == flat.shape and got.is_contiguous()
    assert torch.equal(got, clamped_gather_shift(flat, shift, pad))
    if pad:
        assert not torch.equal(got, flat)


def test_augmentation_is_unchanged_by_the_faster_shift(monkeypatch):
    images = torch.randint(0, 256, (4, 2, 16, 16, 3), dtype=torch.uint8)
    fast = augment_images(images, torch.Generator().manual_seed(7), 2)
    monkeypatch.setattr("arm_act.policy.data._shift_edge_padded", clamped_gather_shift)
    assert torch.equal(fast, augment_images(images, torch.Generator().manual_seed(7), 2))


@pytest.mark.parametrize("p", [0.1, 0.25, 0.9])
def test_fast_dropout_mask_is_the_comparison_mask(monkeypatch, p):
    monkeypatch.setattr(dropout, "IMPL", "fast")
    x = torch.randn(3, 7, 13)  # an odd element count: the last word is cut
    torch.manual_seed(11)
    got = dropout.dropout(x, p)
    # The formulation it replaced: uniforms >= threshold - 32768 as a bool, to float, scaled.
    torch.manual_seed(11)
    threshold = int(round(p * 65536))
    words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(-(2**63), None)
    keep = words.view(torch.int16)[:x.numel()].view(x.shape) >= threshold - 32768
    expected = x * keep.to(x.dtype).mul_(65536 / (65536 - threshold))
    assert torch.equal(got, expected)
    assert 0 < int((got == 0).sum()) < x.numel()


def test_attention_bias_mask_is_masked_fill_with_its_gradient():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    mask[0, ..., 3:] = False
    out, weights_ = attention_explicit(q, k, v, mask)
    assert torch.all(weights_[0, ..., 3:] == 0)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    scores = (q @ k.transpose(-2, -1) / math.sqrt(4)).masked_fill(~mask, float("-inf"))
    reference = scores.softmax(dim=-1)
    ref_out = reference @ v
    assert torch.equal(weights_, reference) and torch.equal(out, ref_out)
    ref_grads = torch.autograd.grad(ref_out.square().sum(), (q, k, v))
    assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads, strict=True))


@pytest.mark.slow
def test_multi_tensor_adamw_trains_the_weights_of_the_loop_and_fused_within_rounding(tmp_path, monkeypatch):
    cfg = PolicyConfig(**TINY, target_weight=1.0)
    tcfg = TrainConfig(steps=4, **FAST)
    trained = {}
    for kind in train_module.OPTIMIZERS:
        monkeypatch.setattr(train_module, "OPTIMIZER", kind)
        metrics = train(episodes(), cfg, tcfg, tmp_path / kind, progress=False)
        assert metrics["optimizer"] == kind
        trained[kind] = weights(tmp_path / kind)
    a, b, fused = trained["foreach"], trained["loop"], trained["fused"]
    assert a.keys() == b.keys() == fused.keys() and all(torch.equal(a[k], b[k]) for k in a)
    start = PolicyConfig(**TINY, target_weight=1.0)
    torch.manual_seed(tcfg.seed)
    from arm_act.policy.model import ACTPolicy
    initial = ACTPolicy(start).state_dict()
    assert any(not torch.equal(initial[k], a[k]) for k in a)  # it did train
    # The fused kernel is the same update rounded in another order: the weights differ from
    # the multi-tensor update's by a few % of how far the 4 steps moved them at most (3 %
    # here: a bias whose gradient is near AdamW's eps), not bit for bit.
    moved = max(float((a[k] - initial[k]).abs().max()) for k in a)
    apart = max(float((a[k] - fused[k]).abs().max()) for k in a)
    assert 0.0 < apart < 0.05 * moved, (apart, moved)
    with pytest.raises(ValueError, match="optimizer implementation 'sgd'"):
        train_module.optimizer_flags("sgd")


def test_the_shipped_recipe_trains_on_two_processes_on_the_cpu(tmp_path):
    config = load(ROOT / "config" / "pipeline_default.yaml")
    assert config.train_processes == 2
    cpus = len(os.sched_getaffinity(0))
    pipeline = Pipeline(config, tmp_path / "run", RunOptions(device="cpu"))
    assert pipeline.train_processes() == (min(2, cpus) if cpus > 1 else None)
    assert Pipeline(config, tmp_path / "run", RunOptions(device="cpu", nproc_per_node=1)).train_processes() == 1
    one = load(ROOT / "config" / "pipeline_default.yaml")
    object.__setattr__(one, "train_processes", 1)
    assert Pipeline(one, tmp_path / "run", RunOptions(device="cpu")).train_processes() is None


def test_matmul_precision_is_validated_set_for_the_run_and_restored():
    with pytest.raises(ValueError, match="matmul_precision"):
        TrainConfig(matmul_precision="fp16")
    settings = torch.backends.mkldnn.matmul
    before = settings.fp32_precision
    with train_module.matmul_precision("fp32", torch.device("cpu")) as used:
        assert used == "fp32" and settings.fp32_precision == before
    with train_module.matmul_precision("bf16", torch.device("cpu")) as used:
        assert used == ("bf16" if train_module.cpu_has_bf16() else "fp32")
        assert settings.fp32_precision == ("bf16" if used == "bf16" else before)
    assert settings.fp32_precision == before


@pytest.mark.skipif(not train_module.cpu_has_bf16(), reason="this CPU has no bf16 instructions")
def test_bf16_products_train_close_to_float32(tmp_path):
    cfg = PolicyConfig(**TINY, target_weight=1.0)
    runs = {}
    for precision in ("fp32", "bf16"):
        tcfg = TrainConfig(steps=6, **FAST, matmul_precision=precision)
        runs[precision] = train(episodes(), cfg, tcfg, tmp_path / precision, progress=False)
        assert runs[precision]["matmul_precision"] == precision
    a, b = weights(tmp_path / "fp32"), weights(tmp_path / "bf16")
    assert any(not torch.equal(a[k], b[k]) for k in a)  # the products did change
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 0.02  # 6 steps at lr 3e-4: close
    assert runs["bf16"]["final"]["train_l1"] == pytest.approx(runs["fp32"]["final"]["train_l1"], rel=0.05)
