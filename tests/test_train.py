"""Training: determinism, bit-identical resume, bad inputs, and a tiny end-to-end run of
the real `arm-act train` command on synthetic bags."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from synthetic_bags import write_demo_bag
from train_helpers import interrupt_loss_at

from arm_act.cli import main as cli
from arm_act.policy.checkpoint import load_checkpoint
from arm_act.policy.config import PolicyConfig
from arm_act.policy.model import ACTPolicy
from arm_act.policy.train import TrainConfig, TrainingError, lr_at, train

pytestmark = pytest.mark.unit

TINY = dict(image_size=32, patch_size=16, width=32, heads=2, encoder_layers=1,
            decoder_layers=1, chunk_size=5, mlp_ratio=2, cvae_layers=1, latent_dim=4)
FAST = dict(batch_size=4, warmup_steps=2, val_every=3, checkpoint_every=3, log_every=1,
            val_samples=8, threads=1)


def episodes(n=3, frames=6, seed=0, size=32):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ticks = frames * 5
        out.append(SimpleNamespace(
            bag=f"ep{i}", instruction="put the red block in the box",
            frame_ticks=np.arange(frames, dtype=np.int64) * 5,
            images=rng.integers(0, 256, (frames, 2, size, size, 3), dtype=np.uint8),
            frame_state=rng.normal(size=(frames, 9)).astype(np.float32),
            commands=np.cumsum(rng.normal(size=(ticks, 8)), axis=0).astype(np.float32),
            frame_target=(0.45 + 0.1 * rng.normal(size=(frames, 3))).astype(np.float32)))
    return out


def weights(directory):
    return load_file(str(directory / "model.safetensors"))


def assert_same(a, b):
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path, monkeypatch):
    # CVAE + augmentation + dropout: every source of randomness is exercised.
    cfg = PolicyConfig(**TINY, use_cvae=True)
    tcfg = TrainConfig(steps=6, **FAST)
    data = episodes()
    full = train(data, cfg, tcfg, tmp_path / "full", progress=False)
    part = train(data, cfg, tcfg, tmp_path / "split", progress=False, stop_after=3)
    assert part["steps"] == 3 and not (tmp_path / "split" / "model.safetensors").exists()
    resumed = train(data, cfg, tcfg, tmp_path / "split", progress=False)
    assert resumed["steps"] == full["steps"] == 6
    assert_same(weights(tmp_path / "full"), weights(tmp_path / "split"))
    assert resumed["final"] == full["final"]

    # Ctrl-C in the middle of step 5 (batch drawn, weights untouched) saves step 4's state.
    interrupt_loss_at(monkeypatch, 5)
    with pytest.raises(KeyboardInterrupt):
        train(data, cfg, tcfg, tmp_path / "ctrl_c", progress=False)
    monkeypatch.undo()
    assert json.loads((tmp_path / "ctrl_c" / "train_state" / "state.json").read_text())["step"] == 4
    train(data, cfg, tcfg, tmp_path / "ctrl_c", progress=False)
    assert_same(weights(tmp_path / "full"), weights(tmp_path / "ctrl_c"))
    train(data, cfg, tcfg, tmp_path / "again", progress=False)  # same seed, same weights
    assert_same(weights(tmp_path / "full"), weights(tmp_path / "again"))
    other = train(data, cfg, TrainConfig(steps=2, seed=1, **FAST), tmp_path / "seed1",
                  progress=False)
    assert other["steps"] == 2
    assert not torch.equal(weights(tmp_path / "full")["head.weight"],
                           weights(tmp_path / "seed1")["head.weight"])


@pytest.mark.slow
def test_outputs_checkpoint_curves_and_metrics(tmp_path):
    out = tmp_path / "ckpt"
    metrics = train(episodes(), PolicyConfig(**TINY), TrainConfig(steps=3, **FAST), out,
                    progress=False, data_info={"skipped_failed": 1})
    model, normalizer, config = load_checkpoint(out)
    assert config == PolicyConfig(**TINY)
    assert (out / "loss_curves.png").stat().st_size > 1000
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["steps"] == 3 and saved["data"]["skipped_failed"] == 1
    assert saved["data"]["train_episodes"] + saved["data"]["val_episodes"] == 3
    assert saved["data"]["val_episodes"] == 1 and saved["final"]["val_l1"] > 0
    assert math.isfinite(metrics["final"]["train_l1"]) and metrics["samples_per_s"] > 0
    assert {"train", "policy", "wall_time_s", "samples_per_s"} <= set(saved)


def test_target_head_is_trained_and_reported(tmp_path):
    out = tmp_path / "ckpt"
    metrics = train(episodes(), PolicyConfig(**TINY, target_weight=1.0),
                    TrainConfig(steps=3, **FAST), out, progress=False)
    model, _, config = load_checkpoint(out)
    assert config.target_weight == 1.0 and model.target_head is not None
    assert metrics["final"]["val_target_cm"] > 0
    history = json.loads((out / "metrics.json").read_text())
    assert history["final"]["val_target_cm"] == metrics["final"]["val_target_cm"]
    assert (out / "loss_curves.png").stat().st_size > 1000


def test_resume_refuses_another_config_or_other_data(tmp_path):
    out = tmp_path / "ckpt"
    data = episodes()
    tcfg = TrainConfig(steps=3, **FAST)
    train(data, PolicyConfig(**TINY), tcfg, out, progress=False, stop_after=2)
    with pytest.raises(TrainingError, match=r"another policy config \(width: saved 32, now 64\)"):
        train(data, PolicyConfig(**{**TINY, "width": 64}), tcfg, out, progress=False)
    with pytest.raises(TrainingError, match="other training settings .*lr"):
        train(data, PolicyConfig(**TINY), TrainConfig(steps=3, lr=1e-3, **FAST), out,
              progress=False)
    with pytest.raises(TrainingError, match="other data"):
        train(episodes(seed=1), PolicyConfig(**TINY), tcfg, out, progress=False)
    # A finished checkpoint of another config is not overwritten silently either.
    train(data, PolicyConfig(**TINY), tcfg, out, progress=False)
    for path in (out / "train_state").iterdir():
        path.unlink()
    (out / "train_state").rmdir()
    with pytest.raises(TrainingError, match="holds a checkpoint of another policy config"):
        train(data, PolicyConfig(**{**TINY, "chunk_size": 4}), tcfg, out, progress=False)
    train(data, PolicyConfig(**{**TINY, "chunk_size": 4}), tcfg, out, progress=False,
          resume=False)
    assert load_checkpoint(out)[2].chunk_size == 4


def test_init_from_starts_at_the_checkpoints_weights_and_statistics(tmp_path):
    base = tmp_path / "base"
    train(episodes(), PolicyConfig(**TINY), TrainConfig(steps=3, **FAST), base, progress=False)
    # Other data, so fresh statistics would differ; a tiny lr leaves the weights where they start.
    tuned = tmp_path / "tuned"
    metrics = train(episodes(seed=5), PolicyConfig(**TINY),
                    TrainConfig(steps=2, lr=1e-12, init_from=str(base), **FAST), tuned, progress=False)
    a, b = weights(tuned), weights(base)
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=0, atol=1e-9) for k in a)
    assert (tuned / "normalization.json").read_text() == (base / "normalization.json").read_text()
    assert metrics["train"]["init_from"] == str(base)
    fresh = tmp_path / "fresh"
    train(episodes(seed=5), PolicyConfig(**TINY), TrainConfig(steps=2, lr=1e-12, **FAST), fresh, progress=False)
    assert (fresh / "normalization.json").read_text() != (base / "normalization.json").read_text()
    with pytest.raises(TrainingError, match=r"init_from .* another policy config \(width"):
        train(episodes(), PolicyConfig(**{**TINY, "width": 64}),
              TrainConfig(steps=2, init_from=str(base), **FAST), tmp_path / "other", progress=False)
    with pytest.raises(TrainingError, match="init_from: checkpoint directory .* does not exist"):
        train(episodes(), PolicyConfig(**TINY), TrainConfig(steps=2, init_from=str(tmp_path / "nope"), **FAST),
              tmp_path / "other", progress=False)


def test_init_from_grows_the_vocabulary_and_the_instruction_tokens(tmp_path):
    from arm_act.common.instructions import family_vocab, longest_instruction, training_phrasings_of

    base = tmp_path / "base"
    train(episodes(), PolicyConfig(**TINY), TrainConfig(steps=3, **FAST), base, progress=False)
    grown_cfg = PolicyConfig(**TINY, vocab=family_vocab(), max_instruction_tokens=longest_instruction())
    tuned = tmp_path / "tuned"
    train(episodes(), grown_cfg, TrainConfig(steps=2, lr=1e-12, init_from=str(base), paraphrase=True, **FAST),
          tuned, progress=False, phrasings=training_phrasings_of)
    a, b = weights(tuned), weights(base)
    assert a.keys() == b.keys()
    old_words = len(PolicyConfig().vocab)
    for key in a:
        if key == "word_embed.weight":  # the old words keep their rows; the new ones are fresh
            assert a[key].shape == (len(family_vocab()), TINY["width"])
            assert torch.allclose(a[key][:old_words], b[key], rtol=0, atol=1e-9)
            assert not torch.allclose(a[key][old_words:], torch.zeros_like(a[key][old_words:]))
        else:
            assert torch.allclose(a[key], b[key], rtol=0, atol=1e-9), key
    assert load_checkpoint(tuned)[2] == grown_cfg
    # The new rows depend on the seed alone: every data-parallel process starts with the same.
    from arm_act.policy.train import _load_init

    torch.manual_seed(1)
    first = _load_init(str(base), grown_cfg, seed=0)[0].word_embed.weight
    torch.manual_seed(2)
    torch.testing.assert_close(_load_init(str(base), grown_cfg, seed=0)[0].word_embed.weight, first, rtol=0, atol=0)
    # A vocabulary that reorders the checkpoint's words, or fewer tokens, is another policy.
    shuffled = PolicyConfig(**TINY, vocab=("<pad>", "<unk>", "the", "put", "red", "block", "in", "box"))
    fewer = PolicyConfig(**TINY, max_instruction_tokens=4)
    for cfg in (shuffled, fewer):
        with pytest.raises(TrainingError, match="may only extend the vocabulary"):
            train(episodes(), cfg, TrainConfig(steps=2, init_from=str(base), **FAST), tmp_path / "bad",
                  progress=False)


def test_init_from_adds_the_place_head(tmp_path):
    from arm_act.policy.train import _load_init

    base = tmp_path / "base"
    train(episodes(), PolicyConfig(**TINY, target_weight=1.0), TrainConfig(steps=3, **FAST), base, progress=False)
    placed = PolicyConfig(**TINY, target_weight=1.0, place_weight=1.0, condition_on_place=True)
    tuned = tmp_path / "tuned"
    metrics = train(episodes(), placed, TrainConfig(steps=2, lr=1e-12, init_from=str(base), **FAST), tuned,
                    progress=False)
    a, b = weights(tuned), weights(base)
    added = sorted(set(a) - set(b))
    assert added and all(k.startswith(("patch_place_head.", "place_head.", "place_to_queries.")) for k in added)
    for key in b:  # every weight of the checkpoint is kept
        assert torch.allclose(a[key], b[key], rtol=0, atol=1e-9), key
    assert a["place_to_queries.2.weight"].abs().max() < 1e-9  # starts as the unconditioned model
    assert metrics["final"]["val_place_cm"] > 0  # the demonstrations label the place
    # The new layers depend on the seed alone: every data-parallel process starts with the same.
    torch.manual_seed(1)
    first = _load_init(str(base), placed, seed=0)[0].place_head.weight
    torch.manual_seed(2)
    torch.testing.assert_close(_load_init(str(base), placed, seed=0)[0].place_head.weight, first, rtol=0, atol=0)
    # A head is added, never taken away.
    with pytest.raises(TrainingError, match="add the place head"):
        _load_init(str(tuned), PolicyConfig(**TINY, target_weight=1.0), seed=0)


def test_paraphrase_needs_a_vocabulary_that_holds_every_phrasing(tmp_path):
    from arm_act.common.instructions import training_phrasings_of

    # The default vocabulary lacks "place", "drop", "one", ...: training would feed <unk>.
    with pytest.raises(TrainingError, match="outside the policy's vocabulary"):
        train(episodes(), PolicyConfig(**TINY), TrainConfig(steps=2, paraphrase=True, **FAST), tmp_path / "p",
              progress=False, phrasings=training_phrasings_of)
    with pytest.raises(TrainingError, match="paraphrase needs the phrasings"):
        train(episodes(), PolicyConfig(**TINY), TrainConfig(steps=2, paraphrase=True, **FAST), tmp_path / "q",
              progress=False)


def test_damaged_training_state_is_a_clear_error(tmp_path):
    out = tmp_path / "ckpt"
    data, cfg, tcfg = episodes(), PolicyConfig(**TINY), TrainConfig(steps=3, **FAST)
    train(data, cfg, tcfg, out, progress=False, stop_after=1)
    state_file = out / "train_state" / "state.json"
    state = json.loads(state_file.read_text())
    del state["normalization"]
    state_file.write_text(json.dumps(state))
    with pytest.raises(TrainingError, match="no normalization statistics"):
        train(data, cfg, tcfg, out, progress=False)
    (out / "train_state" / "optimizer.safetensors").unlink()
    with pytest.raises(TrainingError, match="optimizer.safetensors is missing"):
        train(data, cfg, tcfg, out, progress=False)


def test_nan_loss_stops_and_keeps_the_last_good_state(tmp_path, monkeypatch):
    real_loss = ACTPolicy.loss
    calls = []

    def flaky(self, batch, generator=None):
        calls.append(1)
        loss, parts = real_loss(self, batch, generator)
        return (loss * math.nan, parts) if len(calls) == 5 else (loss, parts)

    monkeypatch.setattr(ACTPolicy, "loss", flaky)
    out = tmp_path / "ckpt"
    with pytest.raises(TrainingError, match=r"non-finite loss at step 4 .*last good training "
                                            r"state \(step 3\) is kept"):
        train(episodes(), PolicyConfig(**TINY), TrainConfig(steps=8, **FAST), out,
              progress=False)
    assert json.loads((out / "train_state" / "state.json").read_text())["step"] == 3
    assert not (out / "model.safetensors").exists()


def test_bad_inputs(tmp_path):
    with pytest.raises(TrainingError, match="no episodes"):
        train([], PolicyConfig(**TINY), TrainConfig(steps=1, **FAST), tmp_path / "a")
    with pytest.raises(TrainingError, match="image_size"):
        train(episodes(size=16), PolicyConfig(**TINY), TrainConfig(steps=1, **FAST),
              tmp_path / "b", progress=False)
    with pytest.raises(ValueError, match="batch_size=0 must be"):
        TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match="lr=nan"):
        TrainConfig(lr=math.nan)
    with pytest.raises(ValueError, match="unknown train config keys"):
        TrainConfig.from_dict({"stepz": 3})


def test_learning_rate_warms_up_then_follows_a_cosine():
    cfg = TrainConfig(steps=110, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(1e-4)
    assert lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(60, cfg) == pytest.approx(0.55e-3)  # half way down the cosine
    assert lr_at(110, cfg) == pytest.approx(1e-4)


TINY_FLAGS = ["image_size=32", "patch_size=16", "width=32", "heads=2", "encoder_layers=1",
              "chunk_size=5", "mlp_ratio=2", "batch_size=4", "warmup_steps=1", "val_every=2",
              "threads=1"]


@pytest.mark.slow
def test_arm_act_train_end_to_end(tmp_path, capsys):
    data = tmp_path / "data"
    for i in range(3):
        write_demo_bag(data / f"ep_{i}", ticks=20 + 5 * i, seed=i)
    write_demo_bag(data / "ep_failed", ticks=20, success=False, final_state="failure")
    # A takeover episode the policy finished alone: left out from its metadata, never decoded.
    write_demo_bag(data / "ep_policy_only", ticks=20, metadata={"expert_from_s": "none"})
    out = tmp_path / "runs" / "tiny"
    argv = ["train", "--data", str(data), "--out", str(out), "--config", *TINY_FLAGS,
            "--steps", "3", "--seed", "1"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "3 used, 1 failed skipped, 0 incomplete skipped, 1 the policy finished alone skipped" in printed
    assert "checkpoint:" in printed
    model, normalizer, config = load_checkpoint(out)
    assert (config.width, config.chunk_size) == (32, 5)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 3 and metrics["train"]["seed"] == 1
    assert metrics["data"]["skipped_failed"] == 1 and metrics["data"]["episodes"] == 3
    assert metrics["data"]["skipped_policy_only"] == 1
    assert (out / "loss_curves.png").exists()
    cached = sorted(p.name for p in (tmp_path / "runs" / ".cache").glob("*.episode"))
    assert len(cached) == 4 and not any("policy_only" in name for name in cached)

    # Another config on the same --out: one line, exit status 2, the checkpoint untouched.
    assert cli.main(argv + ["--config", "width=64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("arm-act train: error: training state") and "width" in err[-1]
    assert cli.main(["train", "--data", str(data), "--out", str(out), "--config", "wdth=3"]) == 2
    assert "unknown setting 'wdth'" in capsys.readouterr().err


def test_arm_act_train_takes_mixed_camera_rates_but_not_mixed_control_rates(tmp_path, capsys):
    data = tmp_path / "data"
    write_demo_bag(data / "ep_10hz", ticks=20, camera_rate=10, seed=1)
    write_demo_bag(data / "ep_50hz", ticks=20, camera_rate=50, seed=2)
    out = tmp_path / "out"
    assert cli.main(["train", "--data", str(data), "--out", str(out), "--config", *TINY_FLAGS,
                     "--steps", "2"]) == 0
    info = json.loads((out / "metrics.json").read_text())["data"]
    assert (info["control_rate"], info["camera_rate"], info["camera_rates"]) == (50, None, {"10": 1, "50": 1})
    assert info["frames"] == 4 + 20  # a frame every 5 ticks, and one every tick
    capsys.readouterr()
    write_demo_bag(data / "ep_100hz", ticks=20, control_rate=100, camera_rate=10, seed=3)
    assert cli.main(["train", "--data", str(data), "--out", str(tmp_path / "out2"), "--config", *TINY_FLAGS,
                     "--steps", "2"]) == 2
    assert "mix control rates [50, 100] Hz" in capsys.readouterr().err


def test_arm_act_train_on_takeover_bags_the_policy_finished_alone_is_a_clear_error(tmp_path, capsys):
    for i in range(2):
        write_demo_bag(tmp_path / "data" / f"ep_{i}", ticks=10, metadata={"expert_from_s": "none"})
    assert cli.main(["train", "--data", str(tmp_path / "data"), "--out",
                     str(tmp_path / "out"), "--config", *TINY_FLAGS]) == 2
    assert "all 2 bags are takeover episodes the policy finished alone" in capsys.readouterr().err
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_arm_act_train_rejects_bags_without_commands(tmp_path, capsys):
    write_demo_bag(tmp_path / "data" / "ep", ticks=10, commands=False)
    assert cli.main(["train", "--data", str(tmp_path / "data"), "--out",
                     str(tmp_path / "out"), "--config", *TINY_FLAGS]) == 2
    assert "no commands on /arm_controller/commands" in capsys.readouterr().err


def test_arm_act_train_grounding_needs_the_target_head(tmp_path, capsys):
    write_demo_bag(tmp_path / "data" / "ep", ticks=10)
    assert cli.main(["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out"),
                     "--config", *TINY_FLAGS, "grounding_layouts=4"]) == 2
    assert "grounding_layouts needs the target head" in capsys.readouterr().err


def test_config_files_and_overrides_combine_in_order(tmp_path):
    from arm_act.cli.train import build_configs

    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({"policy": {"width": 128, "use_cvae": True}, "train": {"lr": 1e-3}}))
    policy, training = build_configs(
        [str(path), "encoder_layers=3", "policy.cameras=front", "train.augment=false"],
        {"steps": 7, "lr": None})
    assert (policy.width, policy.encoder_layers, policy.use_cvae, policy.cameras) == (
        128, 3, True, ("front",))
    assert (training.lr, training.augment, training.steps) == (1e-3, False, 7)
    with pytest.raises(cli.CommandError, match="width=130 must be divisible"):
        build_configs(["width=130"], {})
    with pytest.raises(cli.CommandError, match="not KEY=VALUE and not a readable file"):
        build_configs([str(tmp_path / "missing.json")], {})


@pytest.mark.parametrize("with_expert_bags", [True, False])
def test_grounding_layouts_borrow_poses_from_the_experts_own_episodes(tmp_path, monkeypatch, with_expert_bags):
    """The layouts' poses come from the episodes the expert drove from the start; a run of
    takeover bags alone falls back to all of them rather than to none."""
    import arm_act.data.training as training

    data = tmp_path / "data"
    if with_expert_bags:
        for i in range(2):
            write_demo_bag(data / f"demo_{i}", ticks=20, seed=i)
    for i in range(2):
        write_demo_bag(data / f"takeover_{i}", ticks=20, seed=10 + i, metadata={"expert_from_s": "0.2"})
    seen = {}
    monkeypatch.setattr(training, "label_pixels", lambda demos, policy_config, cache: None)
    monkeypatch.setattr(training, "grounding_frames",
                        lambda demos, policy_config, train_config, cache: seen.setdefault("bags", demos) and [])
    policy_config = PolicyConfig(image_size=32, patch_size=16, width=32, heads=2, encoder_layers=1, chunk_size=5,
                                 target_weight=1.0)
    data_out = training.prepare_training_data([data], tmp_path / "cache", policy_config,
                                              TrainConfig(grounding_layouts=4))
    assert len(data_out.demos) == (4 if with_expert_bags else 2)
    borrowed = sorted(Path(e.bag).name for e in seen["bags"])
    assert borrowed == (["demo_0", "demo_1"] if with_expert_bags else ["takeover_0", "takeover_1"])
