"""Two checkpoints' batch-1 inference side by side in one process: each exported to ONNX and
run by onnxruntime on one thread (policy_node's backend and thread count), alternating, 3
rounds of 300 inferences each. Prints p50 / p99 per round and the B/A ratio of the p50s, the
worst round last; a machine that slows down during the run slows both alike.

    python benchmarks/inference_ab.py CKPT_A CKPT_B [OUT.json]
"""
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arm_act.policy import onnx_backend as ob
from arm_act.policy.checkpoint import load_checkpoint

ROUNDS, CALLS = 3, 300


def backend(path: str):
    model, _, _ = load_checkpoint(path)
    model.eval()
    inputs = ob.export_inputs(model)
    return ob.OnnxPolicy(ob.export_onnx_bytes(model, inputs), threads=1), inputs, model.num_parameters()


def times(policy, inputs) -> list[float]:
    out = []
    for _ in range(CALLS):
        start = time.perf_counter()
        policy.predict(**inputs)
        out.append(time.perf_counter() - start)
    return out


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    a, b = backend(argv[0]), backend(argv[1])
    rounds = {"a": [], "b": []}
    for _ in range(ROUNDS):
        for name, (policy, inputs, _) in (("a", a), ("b", b)):
            ts = np.array(times(policy, inputs)) * 1e3
            rounds[name].append({"p50_ms": round(float(np.percentile(ts, 50)), 3),
                                 "p99_ms": round(float(np.percentile(ts, 99)), 3)})
    ratios = [round(y["p50_ms"] / x["p50_ms"], 3) for x, y in zip(rounds["a"], rounds["b"], strict=True)]
    result = {"a": {"checkpoint": argv[0], "parameters": a[2], "rounds": rounds["a"]},
              "b": {"checkpoint": argv[1], "parameters": b[2], "rounds": rounds["b"]},
              "b_over_a_p50": ratios, "worst_ratio": max(ratios), "backend": "onnxruntime, 1 thread",
              "rounds": ROUNDS, "calls_per_round": CALLS}
    for name in ("a", "b"):
        print(f"{name} {result[name]['checkpoint']} ({result[name]['parameters']:,} parameters): p50 per round "
              f"{[r['p50_ms'] for r in rounds[name]]} ms, p99 {[r['p99_ms'] for r in rounds[name]]} ms")
    print(f"b/a p50 per round {ratios}; worst {max(ratios)}")
    if len(argv) == 3:
        Path(argv[2]).parent.mkdir(parents=True, exist_ok=True)
        Path(argv[2]).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
