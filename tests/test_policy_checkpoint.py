"""Checkpoint directories: round trip, and a clear CheckpointError for every inconsistency."""

import hashlib
import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from arm_act.policy.budget import torch_threads
from arm_act.policy.checkpoint import (
    CONFIG_FILE,
    METRICS_FILE,
    MODEL_FILE,
    NORMALIZATION_FILE,
    CheckpointError,
    load_checkpoint,
    read_config,
    read_metrics,
    save_checkpoint,
)
from arm_act.policy.config import PolicyConfig
from arm_act.policy.inference_config import InferenceConfig, load_inference_config
from arm_act.policy.model import ACTPolicy
from arm_act.policy.normalizer import Normalizer

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _one_thread():
    with torch_threads(1):  # tiny tensors; see test_policy_model.py
        yield


def tiny_config(**overrides) -> PolicyConfig:
    base = dict(image_size=16, patch_size=8, width=16, heads=2, encoder_layers=1,
                decoder_layers=1, chunk_size=4, dropout=0.0, latent_dim=4, cvae_layers=1)
    return PolicyConfig(**{**base, **overrides})


def make_normalizer() -> Normalizer:
    rng = np.random.default_rng(0)
    return Normalizer.fit(rng.normal(size=(50, 9)), rng.normal(size=(50, 8)))


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = ACTPolicy(tiny_config(use_cvae=True))
    path = save_checkpoint(tmp_path / "ckpt", model, make_normalizer(), {"epochs": 3})
    return path, model


def _inputs(cfg: PolicyConfig):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, len(cfg.vocab), (2, cfg.max_instruction_tokens), generator=g)
    return {"images": torch.rand(2, 2, 3, 16, 16, generator=g),
            "state": torch.randn(2, 9, generator=g), "instruction_ids": ids,
            "instruction_mask": torch.ones(ids.shape, dtype=torch.bool)}


def test_round_trip(saved):
    path, model = saved
    assert sorted(p.name for p in path.iterdir()) == sorted(
        [MODEL_FILE, CONFIG_FILE, NORMALIZATION_FILE, METRICS_FILE, "inference.json"])
    assert load_inference_config(path) == InferenceConfig()  # how it runs: the defaults unless given
    loaded, normalizer, cfg = load_checkpoint(path)
    assert cfg == model.config and read_config(path) == cfg
    assert normalizer == make_normalizer()
    assert read_metrics(path) == {"epochs": 3}
    assert not loaded.training
    inputs = _inputs(cfg)
    torch.testing.assert_close(loaded(**inputs).actions, model.eval()(**inputs).actions,
                               rtol=0, atol=0)
    # Metrics are optional.
    save_checkpoint(path.parent / "bare", model, make_normalizer())
    assert read_metrics(path.parent / "bare") is None


def test_a_convolutional_stem_round_trips(tmp_path):
    torch.manual_seed(0)
    model = ACTPolicy(tiny_config(stem_channels=(4, 6))).eval()
    path = save_checkpoint(tmp_path / "stem", model, make_normalizer())
    loaded, _, cfg = load_checkpoint(path)
    assert cfg.stem_channels == (4, 6)
    assert json.loads((path / CONFIG_FILE).read_text())["policy"]["stem_channels"] == [4, 6]
    inputs = _inputs(cfg)
    torch.testing.assert_close(loaded(**inputs).actions, model(**inputs).actions, rtol=0, atol=0)


def _rewrite_weights(path, edit):
    """Edit the tensors and re-save them the way save_checkpoint would (valid file, matching
    config metadata and checksum), so only the edit itself is wrong."""
    weights = path / MODEL_FILE
    with safe_open(str(weights), framework="pt") as f:
        meta = f.metadata()
    tensors = load_file(str(weights))
    edit(tensors)
    save_file(tensors, str(weights), metadata=meta)
    config = json.loads((path / CONFIG_FILE).read_text())
    config["weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    (path / CONFIG_FILE).write_text(json.dumps(config))


def test_missing_unexpected_and_misshapen_tensors_are_named(saved):
    path, _ = saved

    def edit(t):
        del t["head.bias"]
        t["extra.weight"] = torch.zeros(2)
        t["head.weight"] = torch.zeros(3, 3)
        t["action_queries"] = torch.full_like(t["action_queries"], float("nan"))

    _rewrite_weights(path, edit)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    msg = str(err.value)
    assert "missing keys ['head.bias']" in msg
    assert "unexpected keys ['extra.weight']" in msg
    assert "head.weight: file (3, 3) vs model (8, 16)" in msg
    assert "non-finite values in ['action_queries']" in msg


def test_config_json_that_disagrees_with_the_weights_names_the_fields(saved):
    path, _ = saved
    data = json.loads((path / CONFIG_FILE).read_text())
    data["policy"]["width"] = 32
    data["policy"]["heads"] = 4
    (path / CONFIG_FILE).write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"width: weights 16 vs config.json 32; "
                                              r"heads: weights 2 vs config.json 4"):
        load_checkpoint(path)


def test_expected_config_mismatch_is_named(saved):
    path, _ = saved
    load_checkpoint(path, expected={"cameras": ["front", "wrist"], "image_size": 16})
    with pytest.raises(CheckpointError, match=r"cameras: checkpoint \('front', 'wrist'\) "
                                              r"vs expected \('front',\)"):
        load_checkpoint(path, expected={"cameras": ["front"]})
    with pytest.raises(CheckpointError, match="unknown policy config keys"):
        load_checkpoint(path, expected={"fps": 10})


def test_corrupt_files_give_clear_errors(saved, tmp_path):
    path, model = saved
    weights = path / MODEL_FILE
    good = weights.read_bytes()
    weights.write_bytes(good[: len(good) // 2])  # truncated
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_checkpoint(path)
    flipped = bytearray(good)
    flipped[-5] ^= 0xFF  # one byte of weight data
    weights.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="weights_sha256"):
        load_checkpoint(path)
    weights.write_bytes(good)
    load_checkpoint(path)

    (path / NORMALIZATION_FILE).write_text("{not json")
    with pytest.raises(CheckpointError, match="normalization.json is not valid JSON"):
        load_checkpoint(path)
    (path / CONFIG_FILE).write_text("[]")
    with pytest.raises(CheckpointError, match="config.json must hold a JSON object"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nowhere")


def test_bad_statistics_are_rejected(saved):
    path, _ = saved
    stats = json.loads((path / NORMALIZATION_FILE).read_text())
    stats["action_std"][3] = float("nan")
    (path / NORMALIZATION_FILE).write_text(json.dumps(stats))  # json writes NaN
    with pytest.raises(CheckpointError, match="action_std has non-finite values"):
        load_checkpoint(path)
    stats["action_std"][3] = 1.0
    stats["action_std"] = stats["action_std"][:7]
    stats["action_mean"] = stats["action_mean"][:7]
    (path / NORMALIZATION_FILE).write_text(json.dumps(stats))
    with pytest.raises(CheckpointError, match="action 7 values, config has 9 / 8"):
        load_checkpoint(path)
    (path / NORMALIZATION_FILE).unlink()
    with pytest.raises(CheckpointError, match="normalization.json is missing"):
        load_checkpoint(path)


def test_config_json_missing_field_is_named(saved):
    path, _ = saved
    data = json.loads((path / CONFIG_FILE).read_text())
    del data["policy"]["chunk_size"]
    (path / CONFIG_FILE).write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"missing keys \['chunk_size'\]"):
        load_checkpoint(path)


def test_save_rejects_mismatched_normalizer_and_non_json_metrics(tmp_path):
    model = ACTPolicy(tiny_config())
    small = Normalizer(np.zeros(7), np.ones(7), np.zeros(8), np.ones(8))
    with pytest.raises(ValueError, match="normalizer dims"):
        save_checkpoint(tmp_path / "a", model, small)
    with pytest.raises(ValueError, match="metrics.json must be JSON-serialisable"):
        save_checkpoint(tmp_path / "b", model, make_normalizer(), {"loss": float("nan")})


def test_normalizer_numpy_and_torch():
    norm = make_normalizer()
    x = np.random.default_rng(1).normal(size=(5, 8))
    y = norm.normalize_action(x)
    assert isinstance(y, np.ndarray) and y.dtype == np.float64
    np.testing.assert_allclose(norm.unnormalize_action(y), x, atol=1e-12)
    xt = torch.as_tensor(x, dtype=torch.float32)
    yt = norm.normalize_action(xt)
    assert isinstance(yt, torch.Tensor) and yt.dtype == torch.float32
    np.testing.assert_allclose(yt.numpy(), y, rtol=1e-5, atol=1e-5)
    s32 = np.ones((2, 9), dtype=np.float32)
    assert norm.normalize_state(s32).dtype == np.float32
    assert Normalizer.from_dict(json.loads(json.dumps(norm.to_dict()))) == norm
    with pytest.raises(ValueError, match="action must end in 8 values"):
        norm.normalize_action(np.zeros(7))
    with pytest.raises(ValueError, match="state_std must be > 0"):
        Normalizer(np.zeros(2), np.array([1.0, 0.0]), np.zeros(1), np.ones(1))
    # A joint that never moves: the std is floored, not zero.
    fitted = Normalizer.fit(np.zeros((10, 9)), np.ones((10, 8)))
    assert fitted.state_std.min() == pytest.approx(1e-3)
