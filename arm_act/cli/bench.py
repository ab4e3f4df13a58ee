"""`arm-act bench`: latency and throughput of the policy and the loop on this machine.

    arm-act bench                       # full run (a few minutes), table on stdout
    arm-act bench --quick --json        # a short run, every field as one JSON object
    arm-act bench --out benchmarks/results.json

Measures (arm_act/bench.py, arm_act/bench_ros.py): float32 matmul peak; batch-1 inference
of the policy (torch eager and onnxruntime) and of a stock nn.Transformer baseline of the
same shape; rendering both cameras; the in-process loop's real-time factor; the policy
node's command period and observation-to-command latency over DDS. Progress goes to stderr.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from arm_act.cli.main import CommandError


def _default_threads() -> int:
    """policy_node's torch_threads: config/policy.yaml's when it sets it, else InferenceConfig's
    default (what the policy really uses)."""
    import yaml

    from arm_act.common.paths import config_file
    from arm_act.policy.inference_config import InferenceConfig

    try:
        params = yaml.safe_load(config_file("policy.yaml").read_text())["/**"]["ros__parameters"]
        return int(params.get("torch_threads", InferenceConfig.defaults()["threads"]))
    except (OSError, KeyError, TypeError, ValueError):
        return InferenceConfig.defaults()["threads"]


def configure(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object with every field")
    parser.add_argument("--quick", action="store_true",
                        help="few trials and an ~8 s DDS run: checks that it works, not a measurement")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="policy checkpoint (default: the shipped one; random weights if none)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch / onnxruntime intra-op threads (default: policy.yaml's torch_threads)")
    parser.add_argument("--backend", choices=("auto", "torch", "onnx"), default="auto",
                        help="inference backend for the loop and the node (auto: the faster by p50)")
    parser.add_argument("--compare", type=Path, metavar="CKPT",
                        help="another checkpoint whose inference is timed in the same interleaved trials "
                             "(torch eager); compare_ratio = its p50 / --checkpoint's")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--label", default=None, help="a name for this run in the JSON (e.g. before, after)")
    parser.add_argument("--no-ros", action="store_true", help="skip the DDS run (its fields are null)")
    parser.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID for the DDS run")
    parser.add_argument("--arrangement", choices=("processes", "single"), default="processes",
                        help="DDS run: sim_node and policy_node as child processes (as the demo runs "
                             "them) or composed in this one process")
    parser.add_argument("--ros-seconds", type=float, default=None,
                        help="wall seconds of the DDS run after its 1 s warm-up (default 60; --quick 8)")
    parser.add_argument("--camera-rate", type=int, default=None,
                        help="DDS run: camera rate in Hz, a divisor of the 50 Hz control rate (default "
                             "sim.yaml's 10); the policy node infers on every camera pair it can")
    parser.add_argument("--thread-priority", type=int, default=None,
                        help="DDS run: SCHED_FIFO priority of the nodes' deadline threads and the probe's "
                             "(default policy.yaml's 50; 0: the normal scheduler)")
    parser.add_argument("--lock-memory", choices=("yes", "no"), default=None,
                        help="DDS run: both nodes' lock_memory parameter (mlockall at start; default the "
                             "yaml files')")
    parser.add_argument("--ros-only", action="store_true",
                        help="only the DDS run (inference, rendering and loop fields are absent)")


def _fmt(value, unit: str = "", digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def format_table(r: dict) -> str:
    m, p = r["machine"], r["policy"]
    rows = [
        ("machine", f"{m['cpu_model']} ({m.get('cpu_capability', '?')}), {m['usable_cpus']} usable CPUs, "
                    f"torch {m['torch']}, "
                    f"onnxruntime {m['onnxruntime']}, {m['threads']} thread(s); load "
                    f"{m['load_average_1m_start']:.2f} -> {m.get('load_average_1m_end', float('nan')):.2f}"),
        ("policy", f"{p['note']}; N={p['tokens']} tokens, K={p['chunk_size']}, D={p['width']}, "
                   f"{p['encoder_layers']}+{p['decoder_layers']} layers"),
        ("matmul peak", f"{_fmt(r['matmul_peak_gflops'], ' GFLOP/s', 1)}"),
        ("inference", f"{r['inference_backend']}: p50 {_fmt(r['inference_ms_p50'], ' ms')}, "
                      f"p99 {_fmt(r['inference_ms_p99'], ' ms')}; {_fmt(r['inference_gflops'], ' GFLOP', 3)}, "
                      f"{_fmt(r['inference_achieved_gflops_per_s'], ' GFLOP/s', 1)} = "
                      f"{_fmt(100 * r['inference_efficiency'], '%', 0)} of peak"),
        ("  torch / onnx", f"p50 {_fmt(r['inference_torch_ms_p50'], ' ms')} / "
                           f"{_fmt(r['inference_onnx_ms_p50'], ' ms')} ({r['onnx_check']})"),
        ("  baseline", f"nn.Transformer p50 {_fmt(r['baseline_inference_ms_p50'], ' ms')}; "
                       f"baseline / ours = {_fmt(r['baseline_ratio'])}"),
        ("  peer", f"LeRobot-default ACT (ResNet18, D=512, 4+1 layers, K=100) p50 "
                   f"{_fmt(r['peer_inference_ms_p50'], ' ms')} ({r.get('peer_layout', '?')}); "
                   f"peer / ours = {_fmt(r['peer_ratio'], '', 1)}"),
        *([("  compare", f"{r['compare_checkpoint']} (N={r['compare_tokens']} tokens) p50 "
                          f"{_fmt(r['compare_inference_ms_p50'], ' ms')}; compare / ours (torch) = "
                          f"{_fmt(r['compare_ratio'])}")] if r.get("compare_checkpoint") else []),
        ("  predict_chunk", f"p50 {_fmt(r['predict_chunk_ms_p50'], ' ms')}, p99 "
                            f"{_fmt(r['predict_chunk_ms_p99'], ' ms')} (uint8 images in, chunk out)"),
        ("render pair", f"{r['render_size']}: p50 {_fmt(r['render_pair_ms_p50'], ' ms')}, "
                        f"p99 {_fmt(r['render_pair_ms_p99'], ' ms')}"),
        ("in-process loop", f"RTF {_fmt(r['loop_rtf'])} at {r['loop_camera_rate_hz']} Hz cameras "
                            f"({_fmt(r['loop_sim_s'], ' s', 1)} sim in {_fmt(r['loop_wall_s'], ' s', 1)})"),
    ]
    if r.get("control_periods") is not None:
        rows += [
            ("control period", f"sim p50 {_fmt(r['control_period_sim_p50_ms'], ' ms')}, p99 "
                               f"{_fmt(r['control_period_sim_p99_ms'], ' ms')}, missed "
                               f"{r['missed_ticks_sim']}; wall p50 {_fmt(r['control_period_wall_p50_ms'], ' ms')}, "
                               f"p99 {_fmt(r['control_period_wall_p99_ms'], ' ms')}, missed {r['missed_ticks_wall']} "
                               f"({r['control_periods']} periods, {_fmt(r['ros_seconds'], ' s', 0)}, "
                               f"sim RTF {_fmt(r['ros_rtf'])})"),
            ("obs -> command", f"p50 {_fmt(r['obs_to_command_ms_p50'], ' ms')}, p99 "
                               f"{_fmt(r['obs_to_command_ms_p99'], ' ms')} over {r['obs_to_command_pairs']} "
                               f"camera pairs at {r['ros_camera_rate_hz']} Hz; node inference p50 "
                               f"{_fmt(r['ros_node_inference_ms_p50'], ' ms')}"),
        ]
    else:
        rows.append(("over DDS", "skipped"))
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {text}" for name, text in rows]
    if r["quick"]:
        lines.append("(--quick: few trials; not a measurement)")
    return "\n".join(lines)


def run(args) -> int:
    import sys

    from arm_act.bench.suite import run_bench
    from arm_act.common.paths import default_checkpoint
    from arm_act.policy.checkpoint import CheckpointError

    threads = args.threads if args.threads is not None else _default_threads()
    if threads < 1:
        raise CommandError(f"--threads {threads} must be >= 1")
    for flag, path in (("--checkpoint", args.checkpoint), ("--compare", args.compare)):
        if path is not None and not path.is_dir():
            raise CommandError(f"{flag} {path} is not a directory")
    if args.ros_seconds is not None and not args.ros_seconds > 0:
        raise CommandError(f"--ros-seconds {args.ros_seconds} must be > 0")
    if args.camera_rate is not None and (args.camera_rate < 1 or 50 % args.camera_rate):
        raise CommandError(f"--camera-rate {args.camera_rate} must divide the control rate 50")
    if args.thread_priority is not None and not 0 <= args.thread_priority <= 99:
        raise CommandError(f"--thread-priority {args.thread_priority} must be 0 (normal) or 1 .. 99 (SCHED_FIFO)")
    if args.ros_only and args.no_ros:
        raise CommandError("--ros-only and --no-ros exclude each other")
    try:
        report = run_bench(checkpoint=args.checkpoint, default_checkpoint=default_checkpoint(),
                           threads=threads, quick=args.quick, backend=args.backend,
                           ros=not args.no_ros, domain_id=args.domain_id, arrangement=args.arrangement,
                           ros_seconds=args.ros_seconds, camera_rate=args.camera_rate, ros_only=args.ros_only,
                           thread_priority=args.thread_priority, compare=args.compare,
                           lock_memory=None if args.lock_memory is None else args.lock_memory == "yes",
                           progress=lambda msg: print(f"bench: {msg}", file=sys.stderr, flush=True))
    except CheckpointError as exc:
        raise CommandError(str(exc)) from None
    except RuntimeError as exc:  # a node that failed to start, or --backend onnx unavailable
        raise CommandError(str(exc)) from None
    report["label"] = args.label
    report["policy_arrangement"] = args.arrangement
    text = json.dumps(report, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text if args.json or args.ros_only else format_table(report))
    return 0
