"""What exporting the target head costs the ONNX backend: the shipped checkpoint's graph with
actions only (before; the target head was pruned) against actions and the target head's
estimate (after; the aim correction needs it), in one process, alternating, 3 rounds of 300
batch-1 inferences on one thread.

    python benchmarks/onnx_target_head.py [OUT.json]   # default benchmarks/results/aim/onnx_target_head.json
"""
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arm_act.common.paths import default_checkpoint
from arm_act.policy import onnx_backend as ob
from arm_act.policy.checkpoint import load_checkpoint

torch.set_num_threads(1)
model, _, config = load_checkpoint(default_checkpoint())
model.eval()
inputs = ob.export_inputs(model)
after = ob.OnnxPolicy(ob.export_onnx_bytes(model, inputs), threads=1)
orig = ob._has_target
ob._has_target = lambda m, i: False
before = ob.OnnxPolicy(ob.export_onnx_bytes(model, inputs), threads=1)
ob._has_target = orig
assert after.has_target and not before.has_target
def time_it(backend, n=300):
    ts = []
    for _ in range(n):
        start = time.perf_counter()
        backend.predict(**inputs)
        ts.append(time.perf_counter() - start)
    return ts
res = {"before": [], "after": []}
for _ in range(3):
    for name, b in (("before", before), ("after", after)):
        ts = time_it(b)
        res[name].append((float(np.percentile(ts, 50) * 1e3), float(np.percentile(ts, 99) * 1e3)))
for k, v in res.items():
    print(k, "p50 per round", [round(x[0], 3) for x in v], "p99", [round(x[1], 3) for x in v])
ratio = [a[0] / b[0] for a, b in zip(res["after"], res["before"], strict=True)]
print("after/before p50 ratio per round", [round(r, 3) for r in ratio])
out = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/aim/onnx_target_head.json")
out.write_text(json.dumps({"unit": "ms", "rounds": res, "ratio_p50": ratio}, indent=1) + "\n")
