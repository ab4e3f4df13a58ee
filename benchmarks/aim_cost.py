"""What the aim correction costs (docs/training.md, "Aim correction"), in one process:

- inference: the shipped checkpoint's ONNX graph with actions only (before; the exporter
  pruned the target head) against actions and the target head's estimate (after; the
  correction needs it), alternating, 3 rounds of 300 batch-1 inferences on one thread;
- the correction itself: AimCorrector.correct on a pose 5 cm above a block 2 cm off (the
  ramp, kinematics and Jacobian all run), 3 rounds of 3,000 calls;
- the re-grasp reflex (docs/training.md, "Re-grasping"): RegraspReflex.step on the ticks
  that move the arm (rise, over, descend: a 6-D Jacobian and 3 least-squares iterations a
  tick), 3 rounds of whole retries from a reopened grasp at the same pose.

    python benchmarks/aim_cost.py [OUT.json]   # default benchmarks/results/aim/aim_cost.json
"""
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arm_act.assist.panda import panda_aim
from arm_act.assist.regrasp import CLOSE, LOOK, RegraspReflex
from arm_act.common.paths import default_checkpoint
from arm_act.policy import onnx_backend as ob
from arm_act.policy.checkpoint import load_checkpoint
from arm_act.sim.robot import HOME

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

aim = panda_aim(50.0)
q = np.asarray(HOME[:7], dtype=np.float64)
point = aim.kinematics.position(q)
correct = []
for _ in range(3):
    aim.reset()
    aim.observe(point + np.array([0.02, 0.0, -0.05]))
    ts = []
    for _ in range(3000):
        start = time.perf_counter()
        aim.correct(q, 0.04)
        ts.append(time.perf_counter() - start)
    correct.append((float(np.percentile(ts, 50) * 1e3), float(np.percentile(ts, 99) * 1e3)))
print("correct() p50 per round", [round(x[0], 3) for x in correct], "p99", [round(x[1], 3) for x in correct])

reflex = RegraspReflex(aim.kinematics, control_rate=50.0)
target = point + np.array([0.02, 0.0, -0.05])
moving = []
for _ in range(3):
    ts = []
    for _ in range(20):  # whole retries, each from the reopened grasp
        reflex.start(q)
        while reflex.active:
            if reflex.phase == LOOK:
                reflex.observe(target)
                continue
            moves = reflex.phase != CLOSE
            start = time.perf_counter()
            reflex.step()
            if moves:
                ts.append(time.perf_counter() - start)
    moving.append((float(np.percentile(ts, 50) * 1e3), float(np.percentile(ts, 99) * 1e3)))
print("reflex step() p50 per round", [round(x[0], 3) for x in moving], "p99", [round(x[1], 3) for x in moving])
out = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/aim/aim_cost.json")
out.write_text(json.dumps({"unit": "ms, (p50, p99) per round", "inference": res, "inference_ratio_p50": ratio,
                           "correct": correct, "regrasp_reflex_step": moving}, indent=1) + "\n")
