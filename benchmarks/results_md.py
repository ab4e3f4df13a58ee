"""Render `arm-act bench --json` results as benchmarks/RESULTS.md (used by run_bench.sh).

    python benchmarks/results_md.py results.json [results_torch.json ...] > RESULTS.md

One column per JSON file (e.g. the best backend and torch eager), one row per figure.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

# (field, label, format); None rows are section headings.
ROWS = [
    (None, "Machine", None),
    ("matmul_peak_gflops", "float32 matmul peak (GFLOP/s, policy's threads)", "{:.1f}"),
    ("policy_arrangement", "node arrangement over DDS", "{}"),
    (None, "Batch-1 inference (both cameras -> chunk)", None),
    ("inference_backend", "backend measured for the loop and the node", "{}"),
    ("inference_ms_p50", "inference p50 (ms), that backend", "{:.2f}"),
    ("inference_ms_p99", "inference p99 (ms), that backend", "{:.2f}"),
    ("inference_torch_ms_p50", "torch eager p50 (ms)", "{:.2f}"),
    ("inference_onnx_ms_p50", "onnxruntime p50 (ms)", "{:.2f}"),
    ("inference_gflops", "FLOPs per inference (GFLOP)", "{:.3f}"),
    ("inference_efficiency", "achieved / matmul peak", "{:.0%}"),
    ("baseline_inference_ms_p50", "nn.TransformerEncoder/Decoder baseline p50 (ms)", "{:.2f}"),
    ("baseline_ratio", "baseline / ours", "{:.2f}"),
    ("peer_inference_ms_p50", "LeRobot-default ACT (ResNet18, D=512, 4+1 layers, K=100) p50 (ms)", "{:.2f}"),
    ("peer_ratio", "LeRobot-default ACT / ours", "{:.1f}"),
    ("peer_layout", "  its memory layout (the faster for it)", "{}"),
    ("predict_chunk_ms_p50", "PolicyRuntime.predict_chunk p50 (ms)", "{:.2f}"),
    (None, "Sim", None),
    ("render_pair_ms_p50", "render both cameras p50 (ms)", "{:.2f}"),
    ("render_pair_ms_p99", "render both cameras p99 (ms)", "{:.2f}"),
    ("loop_rtf", "in-process loop real-time factor", "{:.2f}"),
    ("loop_camera_rate_hz", "  at camera rate (Hz)", "{}"),
    (None, "policy_node over DDS (sim_node realtime, RTF 1)", None),
    ("control_period_sim_p50_ms", "command period p50, sim time (ms)", "{:.1f}"),
    ("control_period_sim_p99_ms", "command period p99, sim time (ms)", "{:.1f}"),
    ("missed_ticks_sim", "missed ticks, sim time", "{}"),
    ("control_period_wall_p50_ms", "command period p50, wall time (ms)", "{:.1f}"),
    ("control_period_wall_p99_ms", "command period p99, wall time (ms)", "{:.1f}"),
    ("missed_ticks_wall", "missed ticks, wall time", "{}"),
    ("control_periods", "  periods measured", "{}"),
    ("obs_to_command_ms_p50", "camera pair -> first command from it p50 (ms)", "{:.1f}"),
    ("obs_to_command_ms_p99", "camera pair -> first command from it p99 (ms)", "{:.1f}"),
    ("ros_camera_rate_hz", "  at camera rate (Hz)", "{}"),
    ("ros_rtf", "  sim RTF during the run", "{:.3f}"),
]


def cell(report: dict, key: str, fmt: str) -> str:
    value = report.get(key)
    return "-" if value is None else fmt.format(value)


def render(reports: list[dict], names: list[str]) -> str:
    first = reports[0]
    m, p = first["machine"], first["policy"]
    lines = [
        "# Benchmark results",
        "",
        "Produced by `benchmarks/run_bench.sh` (`arm-act bench`); regenerate with it, on a quiet "
        "machine. Medians (p50) and 99th percentiles (p99) over repeated trials; what each "
        "figure measures is documented in arm_act/bench/suite.py and arm_act/bench/over_dds.py.",
        "",
        f"- CPU: {m['cpu_model']}, {m['usable_cpus']} usable of {m['logical_cpus']} logical CPUs; "
        f"{m['platform']}",
        f"- Python {m['python']}, torch {m['torch']}, onnxruntime {m['onnxruntime']}, "
        f"{m['threads']} intra-op thread(s)",
        "- Load average (1 min) before/after: "
        + ", ".join(f"{r['machine']['load_average_1m_start']:.2f}/"
                    f"{r['machine'].get('load_average_1m_end', float('nan')):.2f}" for r in reports),
        f"- Policy: {p['note']}; N={p['tokens']} tokens, K={p['chunk_size']}, D={p['width']}, "
        f"{p['heads']} heads, {p['encoder_layers']} encoder + {p['decoder_layers']} decoder layers",
        "",
        "| figure | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for key, label, fmt in ROWS:
        if key is None:
            lines.append(f"| **{label}** |" + " |" * len(names))
        else:
            lines.append(f"| {label} | " + " | ".join(cell(r, key, fmt) for r in reports) + " |")
    lines += ["", "ONNX check: " + first.get("onnx_check", "-"), ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    reports = [json.loads(Path(path).read_text()) for path in argv]
    names = [f"{r.get('label') or 'backend ' + r['inference_backend']} ({r['machine']['threads']} thread(s), "
             f"{r['inference_backend']})" for r in reports]
    print(render(reports, names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
