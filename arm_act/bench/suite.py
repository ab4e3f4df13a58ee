"""The measurements of `arm-act bench`: matmul peak, batch-1 inference (torch eager,
onnxruntime, a stock nn.Transformer baseline, the LeRobot-default ACT peer), camera rendering, the in-process loop's
real-time factor, and (arm_act/bench_ros.py) the policy node's control period over DDS.

Every timing is repeated and summarised by its median (p50) and 99th percentile (p99,
linear interpolation: with the ~20 trials of --quick it is close to the maximum). Timings
on a shared machine are only as quiet as the machine: the report records the load average
before and after, so a noisy run shows itself.
"""
from __future__ import annotations

import dataclasses
import math
import os
import platform
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

INSTRUCTION = "put the red block in the box"  # 7 words in 8 slots: the padded-mask path


@dataclass(frozen=True)
class Trials:
    """How much to repeat each measurement."""

    inference: int = 200  # timed calls per inference variant
    warmup: int = 20
    render: int = 100  # camera pairs
    matmul_seconds: float = 1.0
    loop_episodes: int = 2
    loop_time_limit: float = 20.0  # sim seconds per episode (a random policy times out)
    ros_seconds: float = 60.0  # wall seconds of command periods over DDS


FULL = Trials()
QUICK = Trials(inference=20, warmup=3, render=10, matmul_seconds=0.2, loop_episodes=1,
               loop_time_limit=2.0, ros_seconds=8.0)


def summarize(samples_ms: list[float]) -> dict[str, float]:
    """{p50, p99, mean, n} of a list of times in ms."""
    if not samples_ms:
        return {"p50": float("nan"), "p99": float("nan"), "mean": float("nan"), "n": 0}
    arr = np.asarray(samples_ms, dtype=np.float64)
    return {"p50": float(np.percentile(arr, 50)), "p99": float(np.percentile(arr, 99)),
            "mean": float(arr.mean()), "n": int(arr.size)}


def time_interleaved(calls: dict[str, Callable[[], Any]], repeats: int, warmup: int,
                     block: int = 5) -> dict[str, list[float]]:
    """Time each call `repeats` times (ms), alternating between the calls in blocks, so a
    change in machine load during the run affects every variant alike."""
    for fn in calls.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in calls}
    while any(len(t) < repeats for t in times.values()):
        for name, fn in calls.items():
            for _ in range(min(block, repeats - len(times[name]))):
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1e3)
    return times


DAMON_SYSFS = Path("/sys/kernel/mm/damon/admin/kdamonds")


def kernel_damon(root: Path = DAMON_SYSFS) -> list[str] | None:
    """The kernel's DAMON workers ("on: pageout" and the like, one per kdamond), or None where
    the kernel has no DAMON sysfs. A running pageout scheme is proactive reclaim: on the
    steal-free EPYC of 3 December, ten minutes at 10 Hz cameras had 8 periods late in wall
    time with it on and 0 with it off (docs/architecture.md, "Late ticks and the host")."""
    if not root.is_dir():
        return None
    workers = []
    for kdamond in sorted(p for p in root.iterdir() if p.name.isdigit()):
        try:
            state = (kdamond / "state").read_text().strip()
            actions = sorted({a.read_text().strip() for a in kdamond.glob("contexts/*/schemes/*/action")})
        except OSError as exc:
            workers.append(f"unreadable: {exc.strerror or exc}")
            continue
        workers.append(f"{state}: {', '.join(actions) or 'monitoring only'}")
    return workers


def machine_info(threads: int) -> dict[str, Any]:
    """The machine a result was measured on. Hosts named alike differ (an "AMD EPYC" with and
    without AVX512 ran this project's benchmarks 2-4x apart): the CPU family/model and the
    instruction set torch's kernels use tell them apart."""
    cpu = platform.processor() or platform.machine()
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
        cpu = fields.get("model name", cpu)
    except OSError:
        pass
    try:
        import onnxruntime

        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = None
    return {"cpu_model": cpu, "logical_cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "platform": platform.platform(), "python": platform.python_version(),
            "cpu_family_model": (f"{fields['cpu family']}/{fields['model']}"
                                 if "cpu family" in fields and "model" in fields else None),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__, "onnxruntime": ort_version, "threads": threads,
            "kernel_damon": kernel_damon(), "load_average_1m_start": os.getloadavg()[0]}


@dataclass
class BenchPolicy:
    model: Any  # ACTPolicy, eval mode
    normalizer: Any
    checkpoint: Path  # a directory the policy node can load (a temp one for random weights)
    random_weights: bool
    note: str


def _shown(path: Path) -> str:
    """The checkpoint path as reports show it: relative to the working directory when it is
    under it, so committed results do not carry one machine's absolute paths."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def load_policy(checkpoint: Path | None, default: Path, scratch: Path) -> BenchPolicy:
    """The given checkpoint, else the shipped one, else the default PolicyConfig with random
    weights (saved under `scratch` so the policy node can load it too). A given checkpoint
    that fails to load raises CheckpointError."""
    from arm_act.policy.checkpoint import load_checkpoint, save_checkpoint
    from arm_act.policy.config import PolicyConfig
    from arm_act.policy.model import ACTPolicy
    from arm_act.policy.normalizer import Normalizer

    path = checkpoint if checkpoint is not None else default
    if checkpoint is not None or (default / "model.safetensors").is_file():
        model, normalizer, _ = load_checkpoint(path)
        return BenchPolicy(model, normalizer, path, False, f"checkpoint {_shown(path)}")
    torch.manual_seed(0)
    model = ACTPolicy(PolicyConfig()).eval()
    normalizer = Normalizer(np.zeros(9), np.ones(9), np.zeros(8), np.ones(8))
    path = save_checkpoint(scratch / "random_default", model, normalizer)
    return BenchPolicy(model, normalizer, path, True,
                       f"no trained checkpoint at {default}: default PolicyConfig with random weights")


def _inputs(runtime) -> dict[str, torch.Tensor]:
    """Preprocessed batch-1 inputs for the real instruction and random camera images."""
    cfg = runtime.config
    rng = np.random.default_rng(0)
    images = {c: rng.integers(0, 256, (cfg.image_size, cfg.image_size, 3), dtype=np.uint8)
              for c in cfg.cameras}
    pixels, state = runtime.preprocess(images, np.zeros(cfg.state_dim))
    ids, mask = runtime.tokenizer.encode(INSTRUCTION)
    return {"images": pixels, "state": state, "instruction_ids": torch.as_tensor(ids)[None],
            "instruction_mask": torch.as_tensor(mask)[None]}


PEER_LAYOUTS = ("contiguous", "channels_last")


def peer_variants(peer, images: torch.Tensor, state: torch.Tensor) -> dict[str, tuple[Any, torch.Tensor]]:
    """The peer and its images in each memory layout, converted once (outside any timed call).

    Our preprocessed images are (B, C, 3, H, W) permuted views of (B, C, H, W, 3) frames;
    the peer is not fed that layout but, per entry of PEER_LAYOUTS, the model and images
    in that memory format: "contiguous" is plain NCHW, "channels_last" is the model's
    convolutions converted with torch.channels_last and the images laid out NHWC per
    camera (viewed back to (B, C, 3, H, W); each camera's slice is then channels_last)."""
    import copy

    shape = images.shape
    channels_last = images.flatten(0, 1).contiguous(memory_format=torch.channels_last).view(shape)
    return {"contiguous": (peer, images.contiguous()),
            "channels_last": (copy.deepcopy(peer).to(memory_format=torch.channels_last), channels_last)}


def pick_peer_layout(times: dict[str, dict[str, float]]) -> str:
    """The peer layout with the lowest p50 among times["peer/<layout>"]."""
    return min(PEER_LAYOUTS, key=lambda layout: times[f"peer/{layout}"]["p50"])


def measure_inference(policy: BenchPolicy, threads: int, trials: Trials, backend: str,
                      matmul_gflops: float, compare: BenchPolicy | None = None) -> dict[str, Any]:
    """Policy inference (torch eager and onnxruntime), the nn.Transformer baseline, FLOPs.
    backend: "torch", "onnx" or "auto" (the faster of the two by p50). compare: another
    checkpoint timed in the same interleaved trials (torch eager, as `torch`), e.g. a larger
    model against the shipped one; compare_ratio is its p50 over this policy's torch p50."""
    from arm_act.bench.baseline import BaselineACT
    from arm_act.bench.peer_act import PeerACT
    from arm_act.policy.budget import count_model_flops
    from arm_act.policy.onnx_backend import verified_onnx_policy
    from arm_act.policy.runtime import PolicyRuntime

    model = policy.model
    runtime = PolicyRuntime(model, policy.normalizer, threads=threads)
    inputs = _inputs(runtime)
    onnx, onnx_note = (None, "not measured (--backend torch)")
    if backend != "torch":
        onnx, onnx_note = verified_onnx_policy(model, threads)
    torch.manual_seed(1)
    baseline = BaselineACT(model.config).eval()
    cfg = model.config
    # The peer (LeRobot-default ACT) sees the same cameras, image size and joint state.
    peer = PeerACT(cameras=len(cfg.cameras), image_size=cfg.image_size, state_dim=cfg.state_dim,
                   action_dim=cfg.action_dim).eval()
    calls = {"torch": lambda: model(**inputs), "baseline": lambda: baseline(**inputs)}
    # The peer is timed in each memory layout and reported in the one fastest for it.
    for layout, (net, images) in peer_variants(peer, inputs["images"], inputs["state"]).items():
        calls[f"peer/{layout}"] = lambda net=net, images=images: net(images, inputs["state"])
    if onnx is not None:
        calls["onnx"] = lambda: onnx.run(**inputs)
    if compare is not None:
        other = compare.model
        other_inputs = _inputs(PolicyRuntime(other, compare.normalizer, threads=threads))
        calls["compare"] = lambda: other(**other_inputs)
    with torch.inference_mode():
        times = {k: summarize(v) for k, v in time_interleaved(calls, trials.inference, trials.warmup).items()}
    flops = count_model_flops(model, inputs)
    if backend == "onnx" and onnx is None:
        raise RuntimeError(f"--backend onnx: {onnx_note}")
    chosen = backend
    if backend == "auto":
        chosen = "onnx" if onnx is not None and times["onnx"]["p50"] < times["torch"]["p50"] else "torch"
    ours = times[chosen]
    achieved = flops / (ours["p50"] * 1e-3) / 1e9
    onnx_times = times.get("onnx", {})
    peer_layout = pick_peer_layout(times)
    peer_times = times[f"peer/{peer_layout}"]
    return {
        "inference_backend": chosen,
        "inference_ms_p50": ours["p50"], "inference_ms_p99": ours["p99"],
        "inference_gflops": flops / 1e9,
        "inference_achieved_gflops_per_s": achieved,
        "inference_efficiency": achieved / matmul_gflops,
        "inference_torch_ms_p50": times["torch"]["p50"], "inference_torch_ms_p99": times["torch"]["p99"],
        "inference_onnx_ms_p50": onnx_times.get("p50"), "inference_onnx_ms_p99": onnx_times.get("p99"),
        "onnx_check": onnx_note,
        "baseline_inference_ms_p50": times["baseline"]["p50"],
        "baseline_inference_ms_p99": times["baseline"]["p99"],
        "baseline_ratio": times["baseline"]["p50"] / ours["p50"],
        "peer_inference_ms_p50": peer_times["p50"],
        "peer_inference_ms_p99": peer_times["p99"],
        "peer_ratio": peer_times["p50"] / ours["p50"],
        "peer_layout": peer_layout,
        "peer_layouts_ms_p50": {layout: times[f"peer/{layout}"]["p50"] for layout in PEER_LAYOUTS},
        "inference_trials": ours["n"],
        "compare_checkpoint": None if compare is None else _shown(compare.checkpoint),
        "compare_tokens": None if compare is None else compare.model.config.encoder_tokens,
        "compare_inference_ms_p50": times["compare"]["p50"] if compare is not None else None,
        "compare_ratio": times["compare"]["p50"] / times["torch"]["p50"] if compare is not None else None,
    }


def measure_predict_chunk(runtime, trials: Trials) -> dict[str, float]:
    """PolicyRuntime.predict_chunk end to end: uint8 images in, unnormalised chunk out."""
    cfg = runtime.config
    rng = np.random.default_rng(1)
    images = {c: rng.integers(0, 256, (cfg.image_size, cfg.image_size, 3), dtype=np.uint8)
              for c in cfg.cameras}
    position = np.zeros(cfg.state_dim)
    times = time_interleaved({"p": lambda: runtime.predict_chunk(images, position, INSTRUCTION)},
                             trials.inference, trials.warmup)["p"]
    stats = summarize(times)
    return {"predict_chunk_ms_p50": stats["p50"], "predict_chunk_ms_p99": stats["p99"]}


def measure_render(trials: Trials) -> dict[str, Any]:
    """Both cameras at the default SimConfig size, one physics tick between pairs."""
    from arm_act.sim import ArmEnv, SimConfig

    config = SimConfig()
    env = ArmEnv(config)
    try:
        env.reset(seed=0, n_blocks=3)
        env.render()  # warm-up: first-use costs of the renderer
        times = []
        for _ in range(trials.render):
            env.step()
            t0 = time.perf_counter()
            env.render()
            times.append((time.perf_counter() - t0) * 1e3)
    finally:
        env.close()
    stats = summarize(times)
    size = config.cameras[0]
    return {"render_pair_ms_p50": stats["p50"], "render_pair_ms_p99": stats["p99"],
            "render_size": f"{size.width}x{size.height}", "render_cameras": len(config.cameras)}


def loop_camera_rate(control_rate: int, minimum: int = 15) -> int:
    """The smallest camera rate >= minimum Hz that divides the control rate."""
    return min(r for r in range(minimum, control_rate + 1) if control_rate % r == 0)


def measure_loop(policy: BenchPolicy, threads: int, backend: str, trials: Trials,
                 latency_ms: float, control_rate: int = 50) -> dict[str, Any]:
    """Real-time factor of sim.rollout.run_episode with the policy in process: physics,
    both cameras and one inference per camera pair, commands at the control rate."""
    from arm_act.eval.in_process import PolicyAgent
    from arm_act.policy.runtime import PolicyRuntime
    from arm_act.sim import ArmEnv, SimConfig
    from arm_act.sim.rollout import run_episode

    size = policy.model.config.image_size
    base = SimConfig(control_rate_hz=control_rate)
    config = SimConfig(control_rate_hz=control_rate, camera_rate_hz=loop_camera_rate(control_rate),
                       episode_time_limit=trials.loop_time_limit,
                       cameras=tuple(dataclasses.replace(c, width=size, height=size) for c in base.cameras))
    runtime = PolicyRuntime(policy.model, policy.normalizer, threads=threads, backend=backend)
    latency_ticks = max(1, math.ceil(latency_ms * 1e-3 * control_rate))
    env = ArmEnv(config)
    sim_s = wall_s = 0.0
    per_episode = []
    try:
        for seed in range(trials.loop_episodes):
            agent = PolicyAgent(runtime, latency_ticks, control_rate=control_rate)
            t0 = time.perf_counter()
            result = run_episode(env, agent, seed, 3, render=True)
            wall = time.perf_counter() - t0
            sim_s, wall_s = sim_s + result.duration, wall_s + wall
            per_episode.append(result.duration / wall)
    finally:
        env.close()
    return {"loop_rtf": sim_s / wall_s, "loop_rtf_per_episode": per_episode,
            "loop_camera_rate_hz": config.camera_rate_hz, "loop_sim_s": sim_s, "loop_wall_s": wall_s,
            "loop_backend": runtime.backend, "loop_image_size": size}


def run_bench(*, checkpoint: Path | None, default_checkpoint: Path, threads: int, quick: bool,
              backend: str = "auto", ros: bool = True, domain_id: int | None = None,
              progress: Callable[[str], None] | None = None, arrangement: str = "processes",
              ros_seconds: float | None = None, camera_rate: int | None = None,
              ros_only: bool = False, thread_priority: int | None = None,
              lock_memory: bool | None = None, compare: Path | None = None) -> dict[str, Any]:
    """Every measurement, as one flat JSON-ready dict (see benchmarks/README.md).
    ros_seconds / camera_rate: the DDS run's length (default the trials') and camera rate
    (default sim.yaml's). ros_only: only the DDS run (the other fields are null); backend
    "auto" then means onnx when it exports and verifies, else torch."""
    if ros_only:
        return run_ros_only(checkpoint=checkpoint, default_checkpoint=default_checkpoint, threads=threads,
                            backend=backend, domain_id=domain_id, progress=progress, arrangement=arrangement,
                            seconds=ros_seconds if ros_seconds is not None else FULL.ros_seconds,
                            camera_rate=camera_rate, quick=quick, thread_priority=thread_priority,
                            lock_memory=lock_memory)
    from arm_act.policy.budget import measure_matmul_gflops

    trials = QUICK if quick else FULL
    if ros_seconds is not None:
        trials = dataclasses.replace(trials, ros_seconds=ros_seconds)
    say = progress or (lambda message: None)
    torch.set_num_threads(threads)
    report: dict[str, Any] = {"quick": quick, "machine": machine_info(threads)}
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="arm_act_bench_")))
        say("matmul peak")
        report["matmul_peak_gflops"] = measure_matmul_gflops(threads, seconds=trials.matmul_seconds)
        policy = load_policy(checkpoint, default_checkpoint, scratch)
        cfg = policy.model.config
        report["policy"] = {"checkpoint": None if policy.random_weights else _shown(policy.checkpoint),
                            "random_weights": policy.random_weights, "note": policy.note,
                            "tokens": cfg.encoder_tokens, "chunk_size": cfg.chunk_size,
                            "width": cfg.width, "heads": cfg.heads,
                            "encoder_layers": cfg.encoder_layers,
                            "decoder_layers": cfg.decoder_layers, "image_size": cfg.image_size,
                            "patch_size": cfg.patch_size, "instruction": INSTRUCTION}
        say("inference: torch, onnxruntime, nn.Transformer baseline")
        other = None if compare is None else load_policy(compare, default_checkpoint, scratch)
        report.update(measure_inference(policy, threads, trials, backend, report["matmul_peak_gflops"], other))
        chosen = report["inference_backend"]
        from arm_act.policy.runtime import PolicyRuntime

        report.update(measure_predict_chunk(
            PolicyRuntime(policy.model, policy.normalizer, threads=threads, backend=chosen), trials))
        say("rendering")
        report.update(measure_render(trials))
        say("in-process loop")
        report.update(measure_loop(policy, threads, chosen, trials, report["inference_ms_p50"]))
        from arm_act.bench.over_dds import ROS_KEYS, measure_control_over_dds

        report.update(dict.fromkeys(ROS_KEYS))  # null unless measured
        if ros:
            say(f"policy node over DDS ({trials.ros_seconds:.0f} s)")
            report.update(measure_control_over_dds(policy.checkpoint, backend=chosen, threads=threads,
                                                   seconds=trials.ros_seconds, domain_id=domain_id,
                                                   logs=scratch, arrangement=arrangement,
                                                   camera_rate=camera_rate, thread_priority=thread_priority,
                                                   lock_memory=lock_memory))
    report["machine"]["load_average_1m_end"] = os.getloadavg()[0]
    return report


def run_ros_only(*, checkpoint: Path | None, default_checkpoint: Path, threads: int, backend: str,
                 domain_id: int | None, progress: Callable[[str], None] | None, arrangement: str,
                 seconds: float, camera_rate: int | None, quick: bool = False,
                 thread_priority: int | None = None, lock_memory: bool | None = None) -> dict[str, Any]:
    """Only the policy node over DDS (arm_act/bench/over_dds.py), as one flat dict."""
    from arm_act.bench.over_dds import measure_control_over_dds

    say = progress or (lambda message: None)
    torch.set_num_threads(threads)
    report: dict[str, Any] = {"quick": quick, "ros_only": True, "machine": machine_info(threads)}
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="arm_act_bench_")))
        policy = load_policy(checkpoint, default_checkpoint, scratch)
        report["policy"] = {"checkpoint": None if policy.random_weights else _shown(policy.checkpoint),
                            "random_weights": policy.random_weights, "note": policy.note}
        chosen = backend
        if backend == "auto":
            from arm_act.policy.onnx_backend import verified_onnx_policy

            onnx, _ = verified_onnx_policy(policy.model, threads)
            chosen = "onnx" if onnx is not None else "torch"
        say(f"policy node over DDS ({seconds:.0f} s, {chosen})")
        report.update(measure_control_over_dds(policy.checkpoint, backend=chosen, threads=threads,
                                               seconds=seconds, domain_id=domain_id, logs=scratch,
                                               arrangement=arrangement, camera_rate=camera_rate,
                                               thread_priority=thread_priority, lock_memory=lock_memory))
    report["machine"]["load_average_1m_end"] = os.getloadavg()[0]
    return report
