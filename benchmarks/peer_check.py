"""Check `arm_act.bench.peer_act.PeerACT` against LeRobot's real ACT, and time both.

Run in a Python environment that has LeRobot installed (PeerACT itself needs only torch):

    PYTHONPATH=. LEROBOT_VENV/bin/python benchmarks/peer_check.py

1. Builds LeRobot's ACT at its `ACTConfig` defaults with our input features (cameras
   `observation.images.front` / `observation.images.wrist` 3x96x96, `observation.state` 9,
   action 8, chunk 100), backbone weights random (`pretrained_backbone_weights=None`: the
   ImageNet weights are a download), its frozen batch-norm statistics randomised so the
   fold into scale/shift is exercised.
2. Copies its weights into PeerACT (the name mapping is `copy_weights`), both in eval mode.
3. Feeds both the same already-normalised inputs at the model level (LeRobot's `ACT`
   module, not the policy wrapper with its normaliser) and reports the largest absolute
   difference of the action chunks.
4. Times LeRobot's ACT, PeerACT and our shipped policy on one thread, batch 1, interleaved
   in the same window, on contiguous NCHW and on channels_last inputs (each model converted
   to the matching memory format once, before timing).

Writes benchmarks/results/peer_check/results.json and prints a table. `--rounds`,
`--repeats` and `--warmup` set the timing; `--no-timing` stops after the equality check.
"""
from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from arm_act.bench.peer_act import PeerACT  # noqa: E402 - after the sys.path line above

CAMERAS = ("observation.images.front", "observation.images.wrist")
IMAGE_SIZE, STATE_DIM, ACTION_DIM, CHUNK = 96, 9, 8, 100
OUT = REPO / "benchmarks" / "results" / "peer_check" / "results.json"


def build_lerobot_act():
    """LeRobot's ACT model module (no normaliser) at the ACTConfig defaults, our features."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACT

    inputs = {name: PolicyFeature(type=FeatureType.VISUAL, shape=(3, IMAGE_SIZE, IMAGE_SIZE)) for name in CAMERAS}
    inputs["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(STATE_DIM,))
    config = ACTConfig(input_features=inputs,
                       output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(ACTION_DIM,))},
                       chunk_size=CHUNK, n_action_steps=CHUNK, pretrained_backbone_weights=None)
    model = ACT(config)
    # Random frozen batch-norm statistics: with the defaults (mean 0, var 1, weight 1, bias 0)
    # a wrong fold would go unnoticed.
    g = torch.Generator().manual_seed(3)
    for name, buf in model.backbone.named_buffers():
        if name.endswith("running_var"):
            buf.copy_(torch.rand(buf.shape, generator=g) * 0.5 + 0.75)
        elif name.endswith(("running_mean", "bias")):
            buf.copy_(torch.randn(buf.shape, generator=g) * 0.1)
        elif name.endswith("weight"):
            buf.copy_(torch.rand(buf.shape, generator=g) * 0.5 + 0.75)
    return config, model.eval()


def _fold(bn) -> tuple[torch.Tensor, torch.Tensor]:
    """torchvision's FrozenBatchNorm2d as y = x * scale + shift (its own formula, eps 1e-5)."""
    scale = bn.weight * (bn.running_var + bn.eps).rsqrt()
    return scale, bn.bias - bn.running_mean * scale


def copy_weights(real, peer: PeerACT) -> list[tuple[str, str]]:
    """Copy LeRobot ACT's weights into PeerACT; returns the (peer, real) name pairs."""
    pairs: list[tuple[str, str]] = []
    peer_state = dict(peer.named_parameters()) | dict(peer.named_buffers())

    def put(peer_name: str, value: torch.Tensor, real_name: str) -> None:
        target = peer_state[peer_name]
        assert target.shape == value.shape, (peer_name, target.shape, value.shape)
        with torch.no_grad():
            target.copy_(value)
        pairs.append((peer_name, real_name))

    def conv(peer_name: str, module, real_name: str) -> None:
        put(f"{peer_name}.weight", module.weight, f"{real_name}.weight")
        if module.bias is not None:
            put(f"{peer_name}.bias", module.bias, f"{real_name}.bias")

    def bn(peer_name: str, module, real_name: str) -> None:
        scale, shift = _fold(module)
        put(f"{peer_name}.scale", scale, f"{real_name}.(weight,running_var)")
        put(f"{peer_name}.shift", shift, f"{real_name}.(bias,running_mean,running_var)")

    b = real.backbone
    conv("backbone.stem.0", b.conv1, "backbone.conv1")
    bn("backbone.stem.1", b.bn1, "backbone.bn1")
    for i in range(8):
        name = f"layer{i // 2 + 1}.{i % 2}"
        block = getattr(b, f"layer{i // 2 + 1}")[i % 2]
        for part in ("conv1", "conv2"):
            conv(f"backbone.layers.{i}.{part}", getattr(block, part), f"backbone.{name}.{part}")
        for part in ("bn1", "bn2"):
            bn(f"backbone.layers.{i}.{part}", getattr(block, part), f"backbone.{name}.{part}")
        if block.downsample is not None:
            conv(f"backbone.layers.{i}.down.0", block.downsample[0], f"backbone.{name}.downsample.0")
            bn(f"backbone.layers.{i}.down.1", block.downsample[1], f"backbone.{name}.downsample.1")
    conv("feature_proj", real.encoder_img_feat_input_proj, "encoder_img_feat_input_proj")
    conv("state_proj", real.encoder_robot_state_input_proj, "encoder_robot_state_input_proj")
    # The latent is all zeros at inference, so its projection is just the bias.
    put("latent", real.encoder_latent_input_proj.bias[None], "encoder_latent_input_proj.bias")
    put("token_pos_1d", real.encoder_1d_feature_pos_embed.weight, "encoder_1d_feature_pos_embed.weight")
    put("query_pos", real.decoder_pos_embed.weight, "decoder_pos_embed.weight")

    def attn(peer_name: str, module, real_name: str) -> None:
        for p in ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"):
            put(f"{peer_name}.{p}", module.get_parameter(p), f"{real_name}.{p}")

    def layer(peer_name: str, module, real_name: str, norms: tuple[str, ...]) -> None:
        attn(f"{peer_name}.self_attn", module.self_attn, f"{real_name}.self_attn")
        if hasattr(module, "multihead_attn"):
            attn(f"{peer_name}.cross_attn", module.multihead_attn, f"{real_name}.multihead_attn")
        conv(f"{peer_name}.mlp.0", module.linear1, f"{real_name}.linear1")
        conv(f"{peer_name}.mlp.2", module.linear2, f"{real_name}.linear2")
        for i, n in enumerate(norms):
            conv(f"{peer_name}.norms.{i}", getattr(module, n), f"{real_name}.{n}")

    for i, m in enumerate(real.encoder.layers):
        layer(f"encoder.{i}", m, f"encoder.layers.{i}", ("norm1", "norm2"))
    for i, m in enumerate(real.decoder.layers):
        layer(f"decoder.{i}", m, f"decoder.layers.{i}", ("norm1", "norm2", "norm3"))
    conv("decoder_norm", real.decoder.norm, "decoder.norm")
    conv("head", real.action_head, "action_head")
    copied = {p for p, _ in pairs}
    missing = set(peer_state) - copied - {"image_pos"}  # image_pos is computed, not learned
    assert not missing, f"peer tensors not copied: {sorted(missing)}"
    return pairs


def real_batch(images: torch.Tensor, state: torch.Tensor) -> dict:
    """LeRobot ACT's model-level batch: a list of per-camera (B, 3, H, W) images."""
    return {"observation.state": state, "observation.images": list(images.unbind(1))}


def layouts(images: torch.Tensor, state: torch.Tensor) -> dict[str, tuple[torch.Tensor, dict]]:
    """Per layout, PeerACT's (B, C, 3, H, W) images and LeRobot's batch, converted once."""
    flat = images.flatten(0, 1)
    cl = flat.contiguous(memory_format=torch.channels_last).view(images.shape)  # NHWC strides
    return {
        "contiguous": (images.contiguous(), real_batch(images.contiguous(), state)),
        "channels_last": (cl, {"observation.state": state,
                               "observation.images": [im.contiguous(memory_format=torch.channels_last)
                                                      for im in images.unbind(1)]}),
    }


def equality(real, peer) -> dict:
    """Largest |difference| of the action chunks, on a few random (already normalised) inputs."""
    g = torch.Generator().manual_seed(0)
    worst, scale = 0.0, 0.0
    with torch.inference_mode():
        for batch in (1, 3):
            images = torch.randn(batch, len(CAMERAS), 3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
            state = torch.randn(batch, STATE_DIM, generator=g)
            want = real(real_batch(images, state))[0]
            got = peer(images, state)
            worst = max(worst, float((want - got).abs().max()))
            scale = max(scale, float(want.abs().max()))
    return {"max_abs_diff": worst, "max_abs_action": scale}


def load_ours():
    """Our shipped policy and its preprocessed batch-1 inputs, or (None, reason)."""
    try:  # reported, not raised: the peer check stands without our policy
        from arm_act.bench.suite import INSTRUCTION
        from arm_act.policy.checkpoint import CheckpointError
        from arm_act.policy.runtime import PolicyRuntime
    except ImportError as exc:
        return None, f"our policy does not import here: {exc}"
    try:
        runtime = PolicyRuntime.from_checkpoint(REPO / "checkpoints" / "default", threads=1)
    except (CheckpointError, OSError, ValueError, RuntimeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    cfg = runtime.config
    rng = np.random.default_rng(0)
    frames = {c: rng.integers(0, 256, (cfg.image_size, cfg.image_size, 3), dtype=np.uint8) for c in cfg.cameras}
    pixels, state = runtime.preprocess(frames, np.zeros(cfg.state_dim))
    ids, mask = runtime.tokenizer.encode(INSTRUCTION)
    inputs = {"images": pixels, "state": state, "instruction_ids": torch.as_tensor(ids)[None],
              "instruction_mask": torch.as_tensor(mask)[None]}
    return (runtime.model.eval(), inputs), None


def time_round(calls: dict, repeats: int, warmup: int) -> dict[str, dict]:
    """Each call `repeats` times, interleaved in blocks (the bench's own timer); p50/p99 in ms."""
    from arm_act.bench.suite import time_interleaved

    samples = time_interleaved(calls, repeats, warmup)
    return {k: {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)), "n": len(v)}
            for k, v in samples.items()}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    import lerobot

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config, real = build_lerobot_act()
    peer = PeerACT(cameras=len(CAMERAS), image_size=IMAGE_SIZE, state_dim=STATE_DIM, action_dim=ACTION_DIM,
                   width=config.dim_model, heads=config.n_heads, mlp=config.dim_feedforward,
                   encoder_layers=config.n_encoder_layers, decoder_layers=config.n_decoder_layers,
                   chunk_size=config.chunk_size).eval()
    pairs = copy_weights(real, peer)
    result = {
        "versions": {"torch": torch.__version__, "lerobot": getattr(lerobot, "__version__", "unknown"),
                     "python": platform.python_version(), "cpu": cpu_model()},
        "config": {"dim_model": config.dim_model, "n_heads": config.n_heads,
                   "dim_feedforward": config.dim_feedforward, "n_encoder_layers": config.n_encoder_layers,
                   "n_decoder_layers": config.n_decoder_layers, "chunk_size": config.chunk_size,
                   "pre_norm": config.pre_norm, "vision_backbone": config.vision_backbone},
        "params": {"lerobot_act": sum(p.numel() for p in real.parameters()),
                   "lerobot_act_without_vae": sum(p.numel() for n, p in real.named_parameters()
                                                  if not n.startswith("vae_encoder")),
                   "peer": sum(p.numel() for p in peer.parameters())},
        "mapped_tensors": len(pairs),
        "equality": equality(real, peer),
    }
    eq = result["equality"]
    print(f"max |LeRobot ACT - PeerACT| over the action chunk: {eq['max_abs_diff']:.3g} "
          f"(actions up to {eq['max_abs_action']:.3g})")
    if not args.no_timing:
        result["timing"] = timing(real, peer, args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}")
    return 0 if eq["max_abs_diff"] < 1e-4 else 1


def timing(real, peer, args) -> dict:
    """LeRobot ACT and PeerACT in both layouts, and our policy, interleaved, `rounds` times."""
    g = torch.Generator().manual_seed(1)
    images = torch.rand(1, len(CAMERAS), 3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
    state = torch.randn(1, STATE_DIM, generator=g)
    data = layouts(images, state)
    models = {"contiguous": (real, peer),
              "channels_last": (copy.deepcopy(real).to(memory_format=torch.channels_last),
                                copy.deepcopy(peer).to(memory_format=torch.channels_last))}
    calls = {}
    for layout, (r, p) in models.items():
        peer_images, batch = data[layout]
        calls[f"lerobot_act/{layout}"] = lambda r=r, b=batch: r(b)
        calls[f"peer_act/{layout}"] = lambda p=p, x=peer_images: p(x, state)
    ours, why_not = load_ours()
    if ours is not None:
        model, inputs = ours
        calls["ours"] = lambda: model(**inputs)
    rounds = []
    with torch.inference_mode():
        for _ in range(args.rounds):
            rounds.append(time_round(calls, args.repeats, args.warmup))
    worst = {k: {"p50": max(r[k]["p50"] for r in rounds), "p99": max(r[k]["p99"] for r in rounds)}
             for k in calls}
    print(f"\n1 thread, batch 1, {args.repeats} calls x {args.rounds} rounds (ms)")
    print(f"{'model/layout':28s} " + " ".join(f"{'p50 r' + str(i + 1):>9s}" for i in range(args.rounds))
          + f" {'p50 worst':>10s} {'p99 worst':>10s}")
    for k in calls:
        print(f"{k:28s} " + " ".join(f"{r[k]['p50']:9.2f}" for r in rounds)
              + f" {worst[k]['p50']:10.2f} {worst[k]['p99']:10.2f}")
    out = {"threads": torch.get_num_threads(), "batch": 1, "repeats": args.repeats, "warmup": args.warmup,
           "rounds": rounds, "worst": worst, "ours": "checkpoints/default" if ours is not None else why_not}
    if ours is not None:
        out["ratio_to_ours_p50_worst"] = {k: worst[k]["p50"] / worst["ours"]["p50"] for k in calls if k != "ours"}
    return out


if __name__ == "__main__":
    sys.exit(main())
