"""The ONNX backend: the exported graph computes what the torch model computes (a fast path
checked against its reference), and PolicyRuntime falls back to torch when the
graph cannot be made or disagrees."""
import logging

import numpy as np
import pytest
import torch

from arm_act.policy import onnx_backend
from arm_act.policy.budget import dummy_inputs, torch_threads
from arm_act.policy.config import PolicyConfig
from arm_act.policy.model import ACTPolicy
from arm_act.policy.normalizer import Normalizer
from arm_act.policy.onnx_backend import OnnxPolicy, export_inputs, verified_onnx_policy
from arm_act.policy.runtime import PolicyRuntime

pytestmark = pytest.mark.unit

INSTRUCTION = "put the red block in the box"


@pytest.fixture(autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


def tiny_config(**overrides) -> PolicyConfig:
    base = dict(image_size=32, patch_size=8, width=32, heads=4, encoder_layers=2,
                decoder_layers=1, chunk_size=6, dropout=0.0, latent_dim=4, cvae_layers=1)
    return PolicyConfig(**{**base, **overrides})


def tiny_model(seed: int = 0, **overrides) -> ACTPolicy:
    torch.manual_seed(seed)
    return ACTPolicy(tiny_config(**overrides)).eval()


def normalizer() -> Normalizer:
    return Normalizer(np.zeros(9), np.ones(9), np.zeros(8), np.full(8, 0.3))


@pytest.mark.parametrize("overrides", [{}, {"use_cvae": True, "decoder_layers": 2, "decoder_rope": True},
                                       {"target_weight": 1.0, "condition_on_target": True},
                                       {"target_weight": 1.0, "condition_on_target": True, "place_weight": 1.0,
                                        "condition_on_place": True},
                                       {"stem_channels": (4, 8), "target_weight": 1.0, "condition_on_target": True}],
                         ids=["plain", "cvae-2dec-rope", "target-conditioned", "place-conditioned", "conv-stem"])
def test_onnx_matches_torch_with_and_without_padding(overrides):
    model = tiny_model(**overrides)
    for mlp in (model.target_to_queries, model.place_to_queries):
        if mlp is not None:  # zero-initialised; trained weights, so that the graph must carry them
            torch.nn.init.normal_(mlp[2].weight, std=0.1)
    backend = OnnxPolicy.export(model, threads=1)
    gen = torch.Generator().manual_seed(3)
    for padded in (True, False):  # the graph holds the masked branch; all-True masks nothing
        inputs = dummy_inputs(model.config, generator=gen)
        if padded:
            inputs["instruction_mask"][:, -2:] = False
            inputs["instruction_ids"][:, -2:] = 0
        with torch.inference_mode():
            reference = model(**inputs).actions
        out = backend(**inputs)
        assert out.shape == reference.shape == (1, 6, 8)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-4)


def test_export_inputs_pad_the_instruction():
    model = tiny_model()
    mask = export_inputs(model)["instruction_mask"]
    assert mask.dtype == torch.bool and not bool(mask.all()) and bool(mask[:, 0].all())


def test_inputs_are_not_mutated():
    model = tiny_model()
    backend = OnnxPolicy.export(model, threads=1)
    inputs = export_inputs(model, torch.Generator().manual_seed(1))
    before = {k: v.clone() for k, v in inputs.items()}
    backend(**inputs)
    for name, value in inputs.items():
        assert torch.equal(value, before[name]), name


def test_runtime_onnx_backend_gives_the_torch_runtime_chunk():
    model = tiny_model()
    torch_rt = PolicyRuntime(model, normalizer(), threads=1)
    onnx_rt = PolicyRuntime(model, normalizer(), threads=1, backend="onnx")
    assert (torch_rt.backend, onnx_rt.backend) == ("torch", "onnx")
    assert "max |onnx - torch|" in onnx_rt.backend_note
    rng = np.random.default_rng(0)
    images = {c: rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for c in model.config.cameras}
    position = rng.normal(size=9)
    expected = torch_rt.predict_chunk(images, position, INSTRUCTION)
    got = onnx_rt.predict_chunk(images, position, INSTRUCTION)
    assert got.attention is None
    np.testing.assert_allclose(got.actions, expected.actions, atol=1e-5)
    # Attention for viewers comes from the torch model, whatever the backend.
    with_attention = onnx_rt.predict_chunk(images, position, INSTRUCTION, need_attention=True)
    assert set(with_attention.attention) == set(model.config.cameras)
    np.testing.assert_allclose(with_attention.actions, expected.actions, atol=1e-5)


def test_the_graph_carries_the_target_head_when_the_model_has_one():
    """The aim correction runs on the target head's estimate, so the ONNX backend returns it
    too (the same as torch to 1e-5 m); a model without the head exports actions only."""
    model = tiny_model(target_weight=1.0)
    torch_rt = PolicyRuntime(model, normalizer(), threads=1)
    onnx_rt = PolicyRuntime(model, normalizer(), threads=1, backend="onnx")
    assert onnx_rt.backend == "onnx" and onnx_rt._onnx.has_target
    rng = np.random.default_rng(1)
    images = {c: rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for c in model.config.cameras}
    position = rng.normal(size=9)
    expected = torch_rt.predict_chunk(images, position, INSTRUCTION)
    got = onnx_rt.predict_chunk(images, position, INSTRUCTION)
    assert expected.target is not None and got.target is not None and got.target.shape == (3,)
    np.testing.assert_allclose(got.target, expected.target, atol=1e-5)
    np.testing.assert_allclose(got.actions, expected.actions, atol=1e-5)
    plain = OnnxPolicy.export(tiny_model(), threads=1)
    assert not plain.has_target
    actions, target = plain.predict(**export_inputs(tiny_model()))
    assert target is None and actions.shape == (1, 6, 8)


def test_a_graph_that_disagrees_falls_back_to_torch(monkeypatch, caplog):
    model = tiny_model()
    other = tiny_model(seed=1)  # an export gone wrong: the graph of different weights
    real_export = onnx_backend.export_onnx_bytes
    monkeypatch.setattr(onnx_backend, "export_onnx_bytes", lambda m, inputs=None: real_export(other, inputs))
    backend, reason = verified_onnx_policy(model, threads=1)
    assert backend is None and "differ" in reason
    with caplog.at_level(logging.WARNING, logger="policy.runtime"):
        runtime = PolicyRuntime(model, normalizer(), threads=1, backend="onnx")
    assert runtime.requested_backend == "onnx" and runtime.backend == "torch"
    assert "differ" in caplog.text
    rng = np.random.default_rng(0)
    images = {c: rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for c in model.config.cameras}
    reference = PolicyRuntime(model, normalizer(), threads=1).predict_chunk(images, np.zeros(9), INSTRUCTION)
    np.testing.assert_array_equal(runtime.predict_chunk(images, np.zeros(9), INSTRUCTION).actions,
                                  reference.actions)


def test_a_failed_export_falls_back_to_torch(monkeypatch):
    def broken(model, inputs=None):
        raise RuntimeError("exporter exploded")

    monkeypatch.setattr(onnx_backend, "export_onnx_bytes", broken)
    model = tiny_model()
    model.train()
    runtime = PolicyRuntime(model, normalizer(), threads=1, backend="onnx")
    assert runtime.backend == "torch" and "exporter exploded" in runtime.backend_note
    assert not runtime.model.training


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="backend='tensorrt'"):
        PolicyRuntime(tiny_model(), normalizer(), backend="tensorrt")
