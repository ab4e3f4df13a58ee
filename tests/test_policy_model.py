"""The policy network on tiny configs: shapes, layout, gradients, determinism, overfitting."""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from arm_act.policy.budget import torch_threads
from arm_act.policy.config import PolicyConfig
from arm_act.policy.model import (
    TARGET_SCALE,
    ACTPolicy,
    TokenLayout,
    chunk_l1,
    kl_divergence,
    patch_cross_entropy,
    target_error,
)
from arm_act.policy.tokens import images_to_tensor, stack_camera_images
from arm_act.policy.vocab import COLOURS, PAD, UNK, InstructionTokenizer, build_vocab, default_vocab

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny tensors gain nothing from a second thread, and on a loaded 2-core machine the
    # thread synchronisation costs ~70x (measured: 5 ms vs 350 ms per training step).
    with torch_threads(1):
        yield


INSTRUCTIONS = ["put the red block in the box", "put the BLUE block in the box",
                "put the mauve block in the box"]


def tiny_config(**overrides) -> PolicyConfig:
    base = dict(image_size=16, patch_size=8, width=16, heads=2, encoder_layers=1,
                decoder_layers=1, chunk_size=4, dropout=0.0, latent_dim=4, cvae_layers=1)
    return PolicyConfig(**{**base, **overrides})


def make_model(config: PolicyConfig, seed: int = 0) -> ACTPolicy:
    torch.manual_seed(seed)
    return ACTPolicy(config)


def make_batch(config: PolicyConfig, batch: int = 3, seed: int = 0,
               dtype=torch.float32) -> dict:
    g = torch.Generator().manual_seed(seed)
    c, s, k = len(config.cameras), config.image_size, config.chunk_size
    ids, mask = InstructionTokenizer(config.vocab, config.max_instruction_tokens).encode_batch(
        (INSTRUCTIONS * batch)[:batch])
    action_mask = torch.ones(batch, k, dtype=torch.bool)
    action_mask[0, k // 2:] = False  # the first sample's chunk runs past its episode's end
    return {"images": torch.rand(batch, c, 3, s, s, generator=g, dtype=dtype),
            "state": torch.randn(batch, config.state_dim, generator=g, dtype=dtype),
            "instruction_ids": ids, "instruction_mask": mask,
            "actions": torch.randn(batch, k, config.action_dim, generator=g, dtype=dtype),
            "action_mask": action_mask,
            "target": 0.45 + 0.1 * torch.randn(batch, 3, generator=g, dtype=dtype),
            "target_patch": torch.randint(-1, config.patches_per_camera, (batch, c), generator=g),
            "place": 0.45 + 0.1 * torch.randn(batch, 3, generator=g, dtype=dtype),
            "place_patch": torch.randint(-1, config.patches_per_camera, (batch, c), generator=g)}


def _obs(batch: dict) -> dict:
    return {k: batch[k] for k in ("images", "state", "instruction_ids", "instruction_mask")}


# Shapes and layout ----------------------------------------------------------------------------
@pytest.mark.parametrize("use_cvae", [False, True])
def test_output_shapes(use_cvae):
    cfg = tiny_config(use_cvae=use_cvae)
    model = make_model(cfg).eval()
    batch = make_batch(cfg)
    out = model(**_obs(batch))
    assert out.actions.shape == (3, cfg.chunk_size, cfg.action_dim)
    assert out.mu is None and out.logvar is None and out.cross_attention is None
    out = model(**_obs(batch), need_weights=True)
    assert out.cross_attention.shape == (3, cfg.heads, cfg.chunk_size, cfg.encoder_tokens)
    grids = model.layout.patch_grids(out.cross_attention)
    assert set(grids) == {"front", "wrist"}
    assert grids["wrist"].shape == (3, cfg.heads, cfg.chunk_size, cfg.grid, cfg.grid)
    if use_cvae:
        out = model(**_obs(batch), actions=batch["actions"], action_mask=batch["action_mask"])
        assert out.mu.shape == out.logvar.shape == (3, cfg.latent_dim)


def test_fast_path_and_weights_path_agree():
    cfg = tiny_config(decoder_layers=2)
    model = make_model(cfg).eval()
    batch = make_batch(cfg)
    fast = model(**_obs(batch)).actions
    with_weights = model(**_obs(batch), need_weights=True)
    torch.testing.assert_close(with_weights.actions, fast, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(with_weights.cross_attention.sum(-1),
                               torch.ones(3, cfg.heads, cfg.chunk_size))


def test_layout_maps_token_indices_to_camera_patches():
    cfg = tiny_config(use_cvae=True, image_size=24)  # 3x3 patches per camera
    layout = TokenLayout.from_config(cfg)
    assert (layout.latent, layout.state) == (0, 1)
    assert layout.instruction == slice(2, 2 + cfg.max_instruction_tokens)
    assert layout.patch_index("front", 0, 0) == layout.instruction.stop
    assert layout.patch_index("wrist", 2, 1) == layout.instruction.stop + 9 + 2 * 3 + 1
    assert layout.n_tokens == cfg.encoder_tokens == layout.camera_slice("wrist").stop
    with pytest.raises(ValueError, match="unknown camera"):
        layout.patch_index("side", 0, 0)
    # Change one patch of the wrist image: exactly that token changes at the encoder input.
    model = make_model(cfg).eval()
    seen = []
    model.encoder.register_forward_hook(lambda mod, args, out: seen.append(args[0]))
    batch = make_batch(cfg, batch=1)
    images = batch["images"].clone()
    images[0, 1, :, 8:16, 0:8] += 0.5  # wrist camera, row 1, col 0
    model(**_obs(batch))
    model(**{**_obs(batch), "images": images})
    changed = (seen[0] - seen[1]).abs().sum(-1)[0].nonzero().flatten().tolist()
    assert changed == [layout.patch_index("wrist", 1, 0)]


def test_padding_words_do_not_matter_and_get_zero_weight():
    cfg = tiny_config()
    model = make_model(cfg).eval()
    batch = make_batch(cfg)
    mask = batch["instruction_mask"]
    assert not bool(mask.all())
    other_ids = batch["instruction_ids"].clone()
    other_ids[~mask] = 5  # a real word where the padding is
    out1 = model(**_obs(batch), need_weights=True)
    out2 = model(**{**_obs(batch), "instruction_ids": other_ids}, need_weights=True)
    torch.testing.assert_close(out1.actions, out2.actions)
    pad_tokens = torch.arange(cfg.max_instruction_tokens)[~mask[0]] + model.layout.instruction.start
    assert torch.all(out1.cross_attention[0][..., pad_tokens] == 0.0)


def test_inputs_are_not_mutated():
    cfg = tiny_config(use_cvae=True, dropout=0.1)
    model = make_model(cfg).train()
    batch = make_batch(cfg)
    before = {k: v.clone() for k, v in batch.items()}
    loss, _ = model.loss(batch)
    loss.backward()
    model.eval()(**_obs(batch), need_weights=True)
    for k, v in batch.items():
        assert torch.equal(v, before[k]), k


def test_bad_inputs_are_rejected_with_shapes_in_the_message():
    cfg = tiny_config()
    model = make_model(cfg).eval()
    obs = _obs(make_batch(cfg))
    with pytest.raises(ValueError, match=r"images must be \(B, 2, 3, 16, 16\)"):
        model(**{**obs, "images": obs["images"][:, :1]})
    with pytest.raises(ValueError, match="uint8"):
        model(**{**obs, "images": (obs["images"] * 255).to(torch.uint8)})
    with pytest.raises(ValueError, match="state must be"):
        model(**{**obs, "state": obs["state"][:, :7]})


# Gradients ------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides", [
    dict(use_cvae=True, decoder_layers=3, decoder_rope=True),
    dict(pre_ln=False, decoder_layers=2),
    dict(target_weight=0.5),
    dict(target_weight=0.5, condition_on_target=True),
    dict(target_weight=0.5, condition_on_target=True, place_weight=0.5, condition_on_place=True),
    dict(stem_channels=(4, 6), target_weight=0.5),
])
def test_every_parameter_receives_a_gradient(overrides):
    # The original ACT built 7 decoder layers but read the first one's output (act#25).
    cfg = tiny_config(**overrides)
    model = make_model(cfg).train()
    for mlp in (model.target_to_queries, model.place_to_queries):
        if mlp is not None:  # its last layer starts at zero, which stops the first one's gradient
            torch.nn.init.normal_(mlp[2].weight, std=0.1)  # as after the first step
    loss, _ = model.loss(make_batch(cfg), generator=torch.Generator().manual_seed(0))
    loss.backward()
    # patch_target_head.bias (and the place head's) shifts every patch's score alike, which a softmax ignores: its
    # gradient is zero up to rounding, so it is not asked to be non-zero.
    dead = [name for name, p in model.named_parameters()
            if name not in ("patch_target_head.bias", "patch_place_head.bias")
            and (p.grad is None or not bool(p.grad.abs().sum() > 0))]
    assert not dead, dead


def test_gradients_match_central_finite_differences_float64():
    cfg = tiny_config(use_cvae=True, decoder_layers=2, decoder_rope=True, chunk_size=3)
    model = make_model(cfg).double().train()
    batch = make_batch(cfg, batch=2, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    w_act = torch.randn(2, cfg.chunk_size, cfg.action_dim, generator=g, dtype=torch.float64)
    w_lat = torch.randn(2, cfg.latent_dim, generator=g, dtype=torch.float64)

    def objective() -> torch.Tensor:
        # A smooth function of every output (the L1 loss has kinks); the same CVAE noise
        # every call.
        out = model(**_obs(batch), actions=batch["actions"], action_mask=batch["action_mask"],
                    generator=torch.Generator().manual_seed(2))
        return (out.actions * w_act).sum() + ((out.mu + out.logvar) * w_lat).sum()

    model.zero_grad()
    objective().backward()
    pick = torch.Generator().manual_seed(3)
    h = 1e-6
    checked = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            flat, grad = p.view(-1), p.grad.view(-1)
            for i in torch.randint(0, flat.numel(), (2,), generator=pick).tolist():
                orig = flat[i].item()
                flat[i] = orig + h
                up = objective().item()
                flat[i] = orig - h
                down = objective().item()
                flat[i] = orig
                numeric = (up - down) / (2 * h)
                assert abs(numeric - grad[i].item()) <= 1e-6 + 1e-5 * abs(numeric), (name, i)
                checked += 1
    assert checked == 2 * len(list(model.parameters()))


# Training behaviour -----------------------------------------------------------------------------
@pytest.mark.slow
def test_tiny_model_overfits_one_batch():
    cfg = tiny_config(width=32, heads=4, use_cvae=True, kl_weight=0.1)
    model = make_model(cfg).train()
    batch = make_batch(cfg, batch=4)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    first = None
    for _ in range(150):
        loss, parts = model.loss(batch, generator=gen)
        first = parts["l1"].item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    pred = model(**_obs(batch)).actions
    final = chunk_l1(pred, batch["actions"], batch["action_mask"]).item()
    assert final < 0.2 * first, (first, final)


def test_same_seed_same_output():
    cfg = tiny_config(use_cvae=True)
    batch = make_batch(cfg)
    a, b = make_model(cfg, seed=4), make_model(cfg, seed=4)
    for name, t in a.state_dict().items():
        assert torch.equal(t, b.state_dict()[name]), name
    assert torch.equal(a.eval()(**_obs(batch)).actions, b.eval()(**_obs(batch)).actions)
    assert not torch.equal(make_model(cfg, seed=5).state_dict()["head.weight"],
                           a.state_dict()["head.weight"])
    # Training mode: the CVAE noise comes from the generator passed in.
    a.train()
    l1, _ = a.loss(batch, generator=torch.Generator().manual_seed(9))
    l2, _ = a.loss(batch, generator=torch.Generator().manual_seed(9))
    l3, _ = a.loss(batch, generator=torch.Generator().manual_seed(10))
    assert l1.item() == l2.item() != l3.item()


def test_loss_ignores_padded_steps_and_adds_kl():
    cfg = tiny_config(use_cvae=True, kl_weight=2.0)
    model = make_model(cfg).eval()  # eval: the latent is the posterior mean, no noise
    batch = make_batch(cfg)
    loss, parts = model.loss(batch)
    torch.testing.assert_close(loss, parts["l1"] + 2.0 * parts["kl"])
    changed = batch["actions"].clone()
    changed[~batch["action_mask"]] += 100.0  # targets past the episode's end
    loss2, _ = model.loss({**batch, "actions": changed})
    torch.testing.assert_close(loss2, loss)
    pred = torch.zeros(1, 2, 2)
    target = torch.tensor([[[1.0, 3.0], [5.0, 7.0]]])
    assert chunk_l1(pred, target).item() == 4.0
    assert chunk_l1(pred, target, torch.tensor([[True, False]])).item() == 2.0
    assert kl_divergence(torch.zeros(2, 3), torch.zeros(2, 3)).item() == 0.0


def test_target_head_adds_its_weighted_error_and_skips_unknown_targets():
    cfg = tiny_config(target_weight=0.5)
    model = make_model(cfg).eval()
    batch = make_batch(cfg)
    out = model(**_obs(batch))
    assert out.target.shape == (3, 3)
    loss, parts = model.loss(batch)
    err = (out.target - batch["target"]).abs().mean()
    torch.testing.assert_close(parts["target_cm"], 100.0 * err)
    assert out.target_logits.shape == (3, len(cfg.cameras), cfg.patches_per_camera)
    known = batch["target_patch"] >= 0
    ce = torch.nn.functional.cross_entropy(out.target_logits[known], batch["target_patch"][known])
    torch.testing.assert_close(parts["patch_ce"], ce)
    torch.testing.assert_close(loss, parts["l1"] + 0.5 * (err / TARGET_SCALE + ce))
    unknown = batch["target"].clone()
    unknown[1] = float("nan")
    _, parts2 = model.loss({**batch, "target": unknown})
    keep = [0, 2]
    torch.testing.assert_close(parts2["target_cm"], 100.0 * (out.target[keep] - batch["target"][keep]).abs().mean())
    none_known = torch.full_like(unknown, float("nan"))
    assert target_error(out.target, none_known).item() == 0.0
    assert patch_cross_entropy(out.target_logits, torch.full((3, 2), -1)).item() == 0.0
    # The position is read from the patches the scores pick: a one-hot score reads one patch.
    logits = torch.full((1, 2, cfg.patches_per_camera), -1e4)
    logits[0, 1, 3] = 0.0
    assert patch_cross_entropy(logits, torch.tensor([[-1, 3]])).item() < 1e-6
    # Without the head nothing changes: no output, no term, no parameters.
    plain = make_model(tiny_config()).eval()
    assert plain(**_obs(batch)).target is None and "target_cm" not in plain.loss(batch)[1]
    assert plain(**_obs(batch)).target_logits is None and "patch_ce" not in plain.loss(batch)[1]
    assert not any(n.startswith("target_head") for n, _ in plain.named_parameters())


# Config, vocabulary, image helpers ------------------------------------------------------------
def test_config_validation_quotes_values():
    with pytest.raises(ValueError, match="chunk_size=0 must be"):
        PolicyConfig(chunk_size=0)
    with pytest.raises(ValueError, match="image_size=100 must be a multiple of patch_size=16"):
        PolicyConfig(image_size=100)
    with pytest.raises(ValueError, match="width=250 must be divisible by heads=8"):
        PolicyConfig(width=250)
    with pytest.raises(ValueError, match="dropout=1.5"):
        PolicyConfig(dropout=1.5)
    with pytest.raises(ValueError, match="duplicates"):
        PolicyConfig(cameras=("front", "front"))


def test_config_json_round_trip_is_strict():
    cfg = tiny_config(use_cvae=True)
    back = PolicyConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and back.cameras == ("front", "wrist")
    with pytest.raises(ValueError, match=r"unknown policy config keys \['colour'\]"):
        PolicyConfig.from_dict({**cfg.to_dict(), "colour": "red"})
    data = cfg.to_dict()
    del data["width"]
    with pytest.raises(ValueError, match=r"missing keys \['width'\]"):
        PolicyConfig.from_dict(data)
    assert PolicyConfig.from_dict({"width": 64}, partial=True).width == 64
    assert cfg.differences(dataclasses.replace(cfg, width=32)) == {"width": (16, 32)}


def test_default_config_token_budget():
    cfg = PolicyConfig()
    assert cfg.patches_per_camera == 36 and cfg.encoder_tokens == 1 + 8 + 72
    assert cfg.chunk_size == 50 and cfg.width == 256 and cfg.heads == 8


def test_vocabulary_and_tokenizer():
    vocab = default_vocab()
    assert vocab[:2] == (PAD, UNK) and set(COLOURS) <= set(vocab)
    assert build_vocab(["a b", "b c"]) == (PAD, UNK, "a", "b", "c")
    tok = InstructionTokenizer(vocab, 8)
    ids, mask = tok.encode("Put  the RED block in the box")
    assert mask.tolist() == [True] * 7 + [False]
    assert tok.decode(ids) == "put the red block in the box"
    ids, _ = tok.encode("put the mauve block")
    assert ids[2] == 1 and ids[4:].tolist() == [0] * 4  # unknown word, padding
    ids, mask = InstructionTokenizer(vocab, 3).encode("put the red block")
    assert mask.all() and tok.decode(ids) == "put the red"  # truncated
    ids_t, mask_t = tok.encode_batch(INSTRUCTIONS)
    assert ids_t.shape == mask_t.shape == (3, 8) and mask_t.dtype == torch.bool
    with pytest.raises(ValueError, match="must start with"):
        InstructionTokenizer(("red", "green"), 4)


def test_image_helpers():
    rgb = np.zeros((6, 8, 3), dtype=np.uint8)
    rgb[..., 0] = 255
    x = images_to_tensor(rgb)
    assert x.shape == (3, 6, 8) and x.dtype == torch.float32
    assert x[0].eq(1).all() and x[1:].eq(0).all()
    x[0] = 0.5  # a fresh tensor: the source array is untouched
    assert rgb[..., 0].min() == 255
    stacked = stack_camera_images({"wrist": rgb, "front": rgb * 0}, ("front", "wrist"))
    assert stacked.shape == (1, 2, 3, 6, 8) and stacked[0, 0].eq(0).all()
    with pytest.raises(ValueError, match="missing camera"):
        stack_camera_images({"front": rgb}, ("front", "wrist"))
    with pytest.raises(ValueError, match="uint8"):
        images_to_tensor(rgb.astype(np.float32))


@pytest.mark.slow
def test_policy_imports_without_ros_or_pybullet():
    code = ("import sys, policy, policy.budget, policy.checkpoint; "
            "bad = [m for m in ('rclpy', 'pybullet') if m in sys.modules]; "
            "sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_the_action_queries_follow_the_target_estimate():
    """condition_on_target: the chunk depends on the target head's estimate through the
    queries. The offset's last layer starts at zero (the unconditioned model's output); once
    it is not zero, moving the estimate moves the chunk."""
    cfg = tiny_config(target_weight=1.0, condition_on_target=True)
    model = make_model(cfg).eval()
    batch = make_batch(cfg)
    inputs = {k: batch[k] for k in ("images", "state", "instruction_ids", "instruction_mask")}
    with torch.no_grad():
        before = model(**inputs).actions
        model.target_head.bias.add_(0.5)  # the estimate moves by 5 cm on every axis
        assert torch.equal(model(**inputs).actions, before)  # zero-initialised: no effect yet
        torch.nn.init.normal_(model.target_to_queries[2].weight, std=0.1)
        after = model(**inputs).actions
        model.target_head.bias.sub_(0.5)
        assert not torch.allclose(model(**inputs).actions, after)


def test_the_place_head_reads_its_own_patches_and_conditions_the_queries():
    """place_weight adds a second pooled position (where the moved block ends), with its own
    patch scores and losses; condition_on_place moves the chunk with it, as the target does."""
    cfg = tiny_config(target_weight=1.0, condition_on_target=True, place_weight=0.5, condition_on_place=True)
    model = make_model(cfg).eval()
    batch = make_batch(cfg)
    with torch.no_grad():
        out = model(**_obs(batch))
        assert out.place.shape == (3, 3) and out.place_logits.shape == (3, len(cfg.cameras), cfg.patches_per_camera)
        assert not torch.allclose(out.place, out.target)  # two heads, two estimates
        before = out.actions
        model.place_head.bias.add_(0.5)
        assert torch.equal(model(**_obs(batch)).actions, before)  # zero-initialised: no effect yet
        torch.nn.init.normal_(model.place_to_queries[2].weight, std=0.1)
        after = model(**_obs(batch)).actions
        model.place_head.bias.sub_(0.5)
        assert not torch.allclose(model(**_obs(batch)).actions, after)
    # Its losses: the place error (cm) and the patch cross-entropy, weighted by place_weight;
    # NaN places and -1 patches are skipped like the target's.
    model.train()
    _, parts = model.loss(batch, generator=torch.Generator().manual_seed(0))
    assert {"place_cm", "place_ce"} <= set(parts) and float(parts["place_cm"]) > 0
    unknown = {**batch, "place": torch.full_like(batch["place"], float("nan")),
               "place_patch": torch.full_like(batch["place_patch"], -1)}
    loss, parts = model.loss(unknown, generator=torch.Generator().manual_seed(0))
    assert float(parts["place_cm"]) == 0.0 and float(parts["place_ce"]) == 0.0 and torch.isfinite(loss)
    # Without the head nothing of it is built or returned.
    plain = make_model(tiny_config(target_weight=1.0)).eval()
    assert plain.place_head is None and plain(**_obs(batch)).place is None


def test_condition_on_place_needs_the_place_head_and_old_configs_load_without_it():
    with pytest.raises(ValueError, match="condition_on_place needs the place head"):
        PolicyConfig(condition_on_place=True, place_weight=0.0)
    with pytest.raises(ValueError, match="place_weight"):
        PolicyConfig(place_weight=-1.0)
    old = PolicyConfig(target_weight=1.0).to_dict()
    del old["place_weight"], old["condition_on_place"]  # a checkpoint written before the fields
    loaded = PolicyConfig.from_dict(old)
    assert loaded.place_weight == 0.0 and loaded.condition_on_place is False


def test_condition_on_target_needs_the_target_head_and_old_configs_load_without_it():
    with pytest.raises(ValueError, match="condition_on_target needs the target head"):
        PolicyConfig(condition_on_target=True, target_weight=0.0)
    old = PolicyConfig(target_weight=1.0).to_dict()
    del old["condition_on_target"]  # a checkpoint written before the field existed
    assert PolicyConfig.from_dict(old).condition_on_target is False
    incomplete = dict(old)
    del incomplete["width"]
    with pytest.raises(ValueError, match=r"missing keys \['width'\]"):
        PolicyConfig.from_dict(incomplete)


# The convolutional stem -----------------------------------------------------------------------
def test_the_stem_keeps_the_token_grid_and_each_token_sees_only_its_own_neighbourhood():
    """Two stride-2 layers: a token's 4x4 patch of the stem's map covers its own 16x16 pixels
    and, through the 3x3 kernels, at most 3 pixels beyond them on each side; pixels farther
    away change no token but their own. The grid and the layout are those without a stem."""
    cfg = PolicyConfig(image_size=32, patch_size=16, width=16, heads=2, stem_channels=(4, 8))
    plain = dataclasses.replace(cfg, stem_channels=())
    assert (cfg.grid, cfg.encoder_tokens) == (plain.grid, plain.encoder_tokens) == (2, 1 + 8 + 8)
    embed = make_model(cfg).patch_embed
    assert embed.patch_size == 4 and embed.proj.in_features == 8 * 4 * 4
    images = torch.rand(1, 2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    before = embed(images)  # (1, C*h*w, D)
    assert before.shape == (1, 8, 16)
    changed = images.clone()
    changed[0, 0, :, 28:, 28:] = 1.0 - changed[0, 0, :, 28:, 28:]  # deep inside camera 0's patch (1, 1)
    after = embed(changed)
    moved = (after - before).abs().amax(-1)[0]  # (C*h*w,)
    assert bool(moved[3] > 1e-4) and bool((moved[[0, 1, 2, 4, 5, 6, 7]] == 0).all())
    # A pixel 2 columns left of patch (0, 1)'s edge reaches it through the kernels, not patch (0, 0)'s far side.
    near = images.clone()
    near[0, 0, :, 4, 14] += 0.5
    moved = (embed(near) - before).abs().amax(-1)[0]
    assert bool(moved[0] > 0) and bool(moved[1] > 0) and bool((moved[2:] == 0).all())


def test_the_stem_is_a_config_field_checked_and_old_configs_load_without_it():
    with pytest.raises(ValueError, match=r"patch_size=4 must be a multiple of 2\^3"):
        PolicyConfig(image_size=16, patch_size=4, stem_channels=(4, 4, 4))
    for bad in ((0,), (True,), (4.0,)):
        with pytest.raises(ValueError, match="stem_channels"):
            PolicyConfig(stem_channels=bad)
    with pytest.raises(ValueError, match="must be a list"):
        PolicyConfig(stem_channels=8)
    cfg = tiny_config(stem_channels=(4,))
    data = json.loads(json.dumps(cfg.to_dict()))
    assert data["stem_channels"] == [4] and PolicyConfig.from_dict(data) == cfg
    old = tiny_config().to_dict()
    del old["stem_channels"]  # a checkpoint written before the field existed: linear patches
    assert PolicyConfig.from_dict(old).stem_channels == ()
    assert not any(n.startswith("patch_embed.stem") for n, _ in make_model(tiny_config()).named_parameters())
