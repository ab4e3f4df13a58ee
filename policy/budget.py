"""Token and FLOP accounting for a PolicyConfig, against the camera and control periods.

Counting a multiply-add as 2 FLOPs, one transformer layer over n tokens of width D costs
(the count of Kaplan et al. 2020, Table 1, plus the AV product): projections Q, K, V, O
8nD^2, an MLP of width 4D 16nD^2, and attention itself (QK^T and AV) 4n^2D, so attention's
share is n / (6D + n). The decoder's K action queries cost 8KD^2 + 4K^2D in self-attention;
cross-attention projects Q and O on the K queries (4KD^2), K and V on the N encoder tokens
(4ND^2), and attends in 4KND.
Softmax, LayerNorm, GELU and additions are not counted (as torch's FlopCounterMode does).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from arm_act.policy.config import PolicyConfig
from arm_act.policy.model import ACTPolicy

# Training a sample costs about 3x its forward pass: the backward pass computes gradients
# for both the activations and the weights, each about one forward's worth of matmuls.
TRAINING_FACTOR = 3


def token_counts(config: PolicyConfig) -> dict[str, int]:
    per_camera = config.patches_per_camera
    return {"per_camera": per_camera, "cameras": len(config.cameras),
            "image": per_camera * len(config.cameras), "state": 1,
            "instruction": config.max_instruction_tokens, "latent": int(config.use_cvae),
            "encoder": config.encoder_tokens, "action_queries": config.chunk_size}


def _split(projections: int, mlp: int, attention: int, **detail: int) -> dict[str, Any]:
    total = projections + mlp + attention
    return {"projections": projections, "mlp": mlp, "attention": attention, "total": total,
            "attention_share": attention / total, **detail}


def encoder_layer_flops(n: int, d: int, mlp_ratio: int = 4) -> dict[str, Any]:
    """One self-attention layer over n tokens: 8nD^2, 16nD^2 (ratio 4), 4n^2D."""
    return _split(8 * n * d * d, 4 * mlp_ratio * n * d * d, 4 * n * n * d)


def decoder_layer_flops(k: int, n: int, d: int, mlp_ratio: int = 4) -> dict[str, Any]:
    """K queries: self-attention among them, cross-attention to n memory tokens, MLP."""
    self_proj, self_attn = 8 * k * d * d, 4 * k * k * d
    cross_proj, cross_attn = 4 * k * d * d + 4 * n * d * d, 4 * k * n * d
    return _split(self_proj + cross_proj, 4 * mlp_ratio * k * d * d, self_attn + cross_attn,
                  self_attention=self_proj + self_attn, cross_attention=cross_proj + cross_attn)


def flop_counts(config: PolicyConfig) -> dict[str, Any]:
    """Analytic forward FLOPs of one sample at inference (no CVAE encoder: z = 0)."""
    d, k, n = config.width, config.chunk_size, config.encoder_tokens
    enc = encoder_layer_flops(n, d, config.mlp_ratio)
    dec = decoder_layer_flops(k, n, d, config.mlp_ratio)
    # The convolutional stem: each 3x3 stride-2 layer gives (side/2)^2 outputs per channel.
    stem, side, channels = 0, config.image_size, 3
    for out in config.stem_channels:
        side = (side + 1) // 2
        stem += 2 * side * side * out * channels * 9
        channels = out
    stem *= len(config.cameras)
    patch_dim = channels * (config.patch_size >> len(config.stem_channels)) ** 2
    patch = stem + 2 * len(config.cameras) * config.patches_per_camera * patch_dim * d
    state = 2 * config.state_dim * d
    head = 2 * k * d * config.action_dim
    total = (patch + state + config.encoder_layers * enc["total"]
             + config.decoder_layers * dec["total"] + head)
    # Training adds the CVAE encoder over [CLS, state, K actions] and the latent projection.
    cvae = 0
    if config.use_cvae:
        cvae = (config.cvae_layers * encoder_layer_flops(k + 2, d, config.mlp_ratio)["total"]
                + 2 * (config.state_dim + k * config.action_dim) * d
                + 2 * d * 2 * config.latent_dim + 2 * config.latent_dim * d)
    return {"encoder_layer": enc, "decoder_layer": dec, "patch_embedding": patch, "stem": stem,
            "state_embedding": state, "action_head": head,
            "encoder": config.encoder_layers * enc["total"],
            "decoder": config.decoder_layers * dec["total"],
            "inference": total, "training_per_sample": TRAINING_FACTOR * (total + cvae)}


def count_parameters(config: PolicyConfig) -> int:
    """Parameters of the real model, built on the meta device (no memory, no init cost)."""
    with torch.device("meta"):
        return ACTPolicy(config).num_parameters()


def dummy_inputs(config: PolicyConfig, batch: int = 1, device: torch.device | str = "cpu",
                 generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """Random inputs of the right shapes (for timing and FLOP counting)."""
    c, s = len(config.cameras), config.image_size
    ids = torch.randint(2, len(config.vocab), (batch, config.max_instruction_tokens),
                        generator=generator)
    return {"images": torch.rand(batch, c, 3, s, s, generator=generator).to(device),
            "state": torch.randn(batch, config.state_dim, generator=generator).to(device),
            "instruction_ids": ids.to(device),
            "instruction_mask": torch.ones(ids.shape, dtype=torch.bool, device=device)}


def _sdpa_cpu_flops(q_shape, k_shape, v_shape, *args, **kwargs) -> int:
    b, h, length, e = q_shape
    return 2 * b * h * length * k_shape[-2] * (e + v_shape[-1])  # QK^T and AV


def count_model_flops(model: ACTPolicy, inputs: dict[str, torch.Tensor],
                      need_weights: bool = False) -> int:
    """FLOPs torch's FlopCounterMode sees in one forward pass of the real model.

    FlopCounterMode has no formula for the fused CPU attention kernel, so one is supplied
    (the same 2*L*S*(E + Ev) per head that it uses for the GPU kernels).
    """
    mapping = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_flops}
    was_training = model.training
    model.eval()
    try:
        # Grad mode stays on: under no_grad, views of parameters (the expanded action
        # queries) require grad without a grad_fn, which trips FlopCounterMode's module
        # tracker. Nothing is kept: no backward pass runs.
        with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
            model(**inputs, need_weights=need_weights)
    finally:
        model.train(was_training)
    return int(counter.get_total_flops())


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run the block with `threads` intra-op threads, restoring the previous count."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def measure_matmul_gflops(threads: int = 2, size: int = 1024, seconds: float = 0.5) -> float:
    """Best float32 (size x size) @ (size x size) rate in GFLOP/s over about `seconds`."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen)
    b = torch.randn(size, size, generator=gen)
    out = torch.empty(size, size)
    best = float("inf")
    with torch_threads(threads):
        torch.mm(a, b, out=out)  # warm-up: thread pool, caches
        deadline = time.perf_counter() + seconds
        for _ in range(1000):
            t0 = time.perf_counter()
            torch.mm(a, b, out=out)
            best = min(best, time.perf_counter() - t0)
            if time.perf_counter() > deadline:
                break
    return 2 * size ** 3 / best / 1e9


def measure_latency(model: ACTPolicy, inputs: dict[str, torch.Tensor], threads: int = 2,
                    repeats: int = 100, warmup: int = 10) -> dict[str, float]:
    """Batch latency of eager inference (eval mode, inference_mode), in ms."""
    model.eval()
    times = []
    with torch_threads(threads), torch.inference_mode():
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            model(**inputs)
            if i >= warmup:
                times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return {"median_ms": statistics.median(times),
            "p99_ms": times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))],
            "repeats": repeats}


def budget_report(config: PolicyConfig, *, threads: int = 2, camera_rate: float = 10.0,
                  control_rate: float = 50.0, matmul_gflops: float | None = None,
                  measure: bool = False, repeats: int = 100) -> dict[str, Any]:
    """Everything `arm-act budget` prints, as a JSON-ready dict."""
    if camera_rate <= 0 or control_rate <= 0:
        raise ValueError(f"camera_rate={camera_rate} and control_rate={control_rate} must be > 0")
    if threads < 1:
        raise ValueError(f"threads={threads} must be >= 1")
    flops = flop_counts(config)
    if matmul_gflops is None:
        matmul_gflops = measure_matmul_gflops(threads)
    predicted_ms = flops["inference"] / (matmul_gflops * 1e9) * 1e3
    camera_ms, control_ms = 1e3 / camera_rate, 1e3 / control_rate
    report: dict[str, Any] = {
        "config": config.to_dict(),
        "tokens": token_counts(config),
        "parameters": count_parameters(config),
        "flops": flops,
        "machine": {"threads": threads, "matmul_gflops": matmul_gflops},
        "latency": {"predicted_ms": predicted_ms},
        "periods": {"camera_ms": camera_ms, "control_ms": control_ms,
                    "predicted_share_of_camera_period": predicted_ms / camera_ms,
                    "predicted_share_of_control_period": predicted_ms / control_ms},
    }
    if measure:
        gen = torch.Generator().manual_seed(0)
        with torch_threads(threads):
            model = ACTPolicy(config).eval()
        timing = measure_latency(model, dummy_inputs(config, generator=gen), threads, repeats)
        achieved = flops["inference"] / (timing["median_ms"] * 1e-3) / 1e9
        report["latency"].update(measured_median_ms=timing["median_ms"],
                                 measured_p99_ms=timing["p99_ms"], achieved_gflops=achieved,
                                 share_of_matmul_peak=achieved / matmul_gflops)
        report["periods"]["measured_share_of_camera_period"] = timing["median_ms"] / camera_ms
    return report


def _m(flops: float) -> str:
    return f"{flops / 1e6:,.1f} M"


def format_report(report: dict[str, Any]) -> str:
    """The human-readable form of budget_report's dict."""
    cfg, tok, fl = report["config"], report["tokens"], report["flops"]
    lat, per, mach = report["latency"], report["periods"], report["machine"]
    enc, dec = fl["encoder_layer"], fl["decoder_layer"]
    n, k = tok["encoder"], tok["action_queries"]
    lines = [
        f"config: {tok['cameras']} camera(s) {cfg['cameras']} at {cfg['image_size']}x"
        f"{cfg['image_size']}, patch {cfg['patch_size']}, width {cfg['width']}, "
        f"{cfg['heads']} heads, {cfg['encoder_layers']} encoder + {cfg['decoder_layers']} "
        f"decoder layers, chunk K={k}, CVAE {'on' if cfg['use_cvae'] else 'off'}",
        f"tokens: {tok['per_camera']} per camera, {tok['image']} image + {tok['state']} state "
        f"+ {tok['instruction']} instruction + {tok['latent']} latent = {n} encoder tokens; "
        f"{k} action queries",
        f"parameters: {report['parameters']:,}",
        "FLOPs per layer            projections   MLP           attention     total"
        "         attention share",
    ]
    for name, row in ((f"encoder (n={n})", enc), (f"decoder (K={k}, N={n})", dec)):
        lines.append(f"  {name:<24} {_m(row['projections']):<13} {_m(row['mlp']):<13} "
                     f"{_m(row['attention']):<13} {_m(row['total']):<13} "
                     f"{row['attention_share']:.1%}")
    lines += [
        f"  (encoder: 8nD^2, 16nD^2, 4n^2D; decoder self-attention {_m(dec['self_attention'])}, "
        f"cross-attention {_m(dec['cross_attention'])})",
        f"per inference: patch embedding {_m(fl['patch_embedding'])}, encoder "
        f"{cfg['encoder_layers']} x {_m(enc['total'])}, decoder {cfg['decoder_layers']} x "
        f"{_m(dec['total'])}, state + head {_m(fl['state_embedding'] + fl['action_head'])}; "
        f"total {fl['inference'] / 1e9:.3f} GFLOP",
        f"training: about {TRAINING_FACTOR}x per sample = "
        f"{fl['training_per_sample'] / 1e9:.3f} GFLOP",
        f"machine: float32 matmul {mach['matmul_gflops']:.1f} GFLOP/s on {mach['threads']} "
        f"thread(s)",
        f"predicted latency at that rate: {lat['predicted_ms']:.2f} ms = "
        f"{per['predicted_share_of_camera_period']:.1%} of the camera period "
        f"({per['camera_ms']:.0f} ms), {per['predicted_share_of_control_period']:.1%} of the "
        f"control period ({per['control_ms']:.0f} ms); a lower bound: eager torch reaches "
        f"only part of the matmul peak on these small matrices",
    ]
    if "measured_median_ms" in lat:
        lines.append(f"measured (random weights, batch 1, eager): median "
                     f"{lat['measured_median_ms']:.2f} ms, p99 {lat['measured_p99_ms']:.2f} ms, "
                     f"{lat['achieved_gflops']:.1f} GFLOP/s = "
                     f"{lat['share_of_matmul_peak']:.0%} of the matmul peak")
    return "\n".join(lines)
