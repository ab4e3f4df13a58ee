"""An exported-graph backend for batch-1 inference: ACTPolicy's inference path exported to
ONNX in memory and run by onnxruntime.

Why: eager torch spends a large share of a ~1 GFLOP forward pass in Python and per-op
dispatch at these small matrix sizes; onnxruntime runs the same graph with fused kernels
(docs/architecture.md, "Design measurements": a 130-token prototype went from ~23 ms
eager to ~11.5 ms, outputs equal to 1e-6; the shipped policy: benchmarks/RESULTS.md).

    backend = OnnxPolicy.export(model, threads=2)              # checks nothing
    backend, reason = verified_onnx_policy(model, threads=2)   # None + reason if unusable
    actions = backend(images, state, instruction_ids, instruction_mask)  # (B, K, A) tensor
    actions, target = backend.predict(images, state, instruction_ids, instruction_mask)
                                                               # ... and the target head's (3,) m, or None

The graph is exported at load time into memory, never written to disk: it always matches
the weights it was made from. Batch size 1 and the input shapes are fixed at export.

Attention weights are not exported: callers that need them (the viewer) use the torch
model (PolicyRuntime does this for need_attention=True).
"""
from __future__ import annotations

import io
import logging
import warnings

import numpy as np
import torch
from torch import nn

from arm_act.policy.budget import dummy_inputs
from arm_act.policy.model import ACTPolicy

logger = logging.getLogger(__name__)

OPSET = 17
INPUT_NAMES = ("images", "state", "instruction_ids", "instruction_mask")
# Max |onnx - torch| over a random input's normalised actions accepted at load.
DEFAULT_TOLERANCE = 1e-4


class _Outputs(nn.Module):
    """ACTPolicy.forward returns a PolicyOutput dataclass; the exporter needs plain tensors:
    the actions (B, K, A), and the target head's estimate (B, 3) when the model has one (the
    aim correction, arm_act.assist.aim, runs on it)."""

    def __init__(self, model: ACTPolicy, with_target: bool):
        super().__init__()
        self.model = model
        self.with_target = with_target

    def forward(self, images, state, instruction_ids, instruction_mask):
        out = self.model(images, state, instruction_ids, instruction_mask, need_weights=False)
        return (out.actions, out.target) if self.with_target else out.actions


def _has_target(model: ACTPolicy, inputs: dict[str, torch.Tensor]) -> bool:
    with torch.inference_mode():
        return model(**inputs, need_weights=False).target is not None


def export_inputs(model: ACTPolicy, generator: torch.Generator | None = None
                  ) -> dict[str, torch.Tensor]:
    """Batch-1 example inputs whose instruction mask pads its last token.

    ACTPolicy.forward skips the key-padding mask when nothing pads (a Python branch on
    instruction_mask.all()), and tracing records only the branch it takes. The real
    instructions, "put the <colour> block in the box", are 7 words in 8 slots, so they take
    the masked branch; exporting that branch is also right for an unpadded instruction (an
    all-True mask masks nothing), while the other would silently ignore padding.
    """
    inputs = dummy_inputs(model.config, batch=1, generator=generator)
    inputs["instruction_mask"][:, -1] = False
    return inputs


def export_onnx_bytes(model: ACTPolicy, inputs: dict[str, torch.Tensor] | None = None) -> bytes:
    """The inference graph (images, state, instruction ids, mask -> actions, and target when
    the model has a target head) as ONNX bytes."""
    inputs = export_inputs(model) if inputs is None else inputs
    with_target = _has_target(model, inputs)
    wrapper = _Outputs(model, with_target).eval()
    buffer = io.BytesIO()
    # The TorchScript-based exporter (dynamo=False): torch.export's exporter needs the
    # onnxscript package, which the pinned requirements do not include. The tracer warns
    # about the branch on instruction_mask.all() and the shape checks in forward(); both
    # are intended to be frozen (see export_inputs).
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
        warnings.filterwarnings("ignore", message=".*will be removed.*")
        warnings.filterwarnings("ignore", message=".*Removing mutation.*")
        torch.onnx.export(wrapper, tuple(inputs[name] for name in INPUT_NAMES), buffer,
                          dynamo=False, opset_version=OPSET, input_names=list(INPUT_NAMES),
                          output_names=["actions", "target"] if with_target else ["actions"],
                          do_constant_folding=True)
    return buffer.getvalue()


class OnnxPolicy:
    """An onnxruntime session over the exported inference graph (float32, CPU)."""

    def __init__(self, onnx_bytes: bytes, threads: int):
        import onnxruntime as ort

        if threads < 1:
            raise ValueError(f"threads={threads} must be >= 1")
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(threads)  # includes the calling thread
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle pool threads otherwise spin between calls and take the core from the renderer
        # and the control tick: 42 -> 15 ms per inference in an in-process loop
        # (docs/architecture.md, "Design measurements").
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3  # errors only
        self.session = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
        self.threads = int(threads)
        self.onnx_bytes = len(onnx_bytes)
        # Tracing may drop inputs the graph does not read; feed only the ones it kept.
        self._inputs = [i.name for i in self.session.get_inputs()]
        self.has_target = "target" in [o.name for o in self.session.get_outputs()]

    @classmethod
    def export(cls, model: ACTPolicy, threads: int,
               generator: torch.Generator | None = None) -> OnnxPolicy:
        return cls(export_onnx_bytes(model, export_inputs(model, generator)), threads)

    def _feed(self, images, state, instruction_ids, instruction_mask) -> dict[str, np.ndarray]:
        given = {"images": images, "state": state, "instruction_ids": instruction_ids,
                 "instruction_mask": instruction_mask}
        return {name: given[name].detach().cpu().numpy() for name in self._inputs}

    def run(self, images: torch.Tensor, state: torch.Tensor, instruction_ids: torch.Tensor,
            instruction_mask: torch.Tensor) -> np.ndarray:
        """Same inputs as ACTPolicy.forward (batch 1) -> actions (1, K, A) float32 array."""
        (actions,) = self.session.run(["actions"], self._feed(images, state, instruction_ids, instruction_mask))
        return actions

    def predict(self, images, state, instruction_ids, instruction_mask
                ) -> tuple[torch.Tensor, np.ndarray | None]:
        """-> (actions (1, K, A) tensor, the target head's estimate (3,) float64 m or None),
        in one run of the graph."""
        if not self.has_target:
            return self(images, state, instruction_ids, instruction_mask), None
        actions, target = self.session.run(["actions", "target"],
                                           self._feed(images, state, instruction_ids, instruction_mask))
        return torch.from_numpy(actions), target[0].astype(np.float64)

    def __call__(self, images, state, instruction_ids, instruction_mask) -> torch.Tensor:
        return torch.from_numpy(self.run(images, state, instruction_ids, instruction_mask))


def max_abs_difference(backend: OnnxPolicy, model: ACTPolicy,
                       generator: torch.Generator | None = None) -> float:
    """Max |onnx - torch| over the normalised actions, and the target estimate (m) where the
    model has one, for one random padded input."""
    inputs = export_inputs(model, generator)
    with torch.inference_mode():
        reference = model(**inputs)
    actions, target = backend.predict(**inputs)
    diff = float(np.max(np.abs(actions.numpy() - reference.actions.numpy())))  # (1, K, A)
    if (target is None) != (reference.target is None):
        return float("inf")
    if target is not None:
        diff = max(diff, float(np.max(np.abs(target - reference.target[0].double().numpy()))))
    return diff


def verified_onnx_policy(model: ACTPolicy, threads: int, tolerance: float = DEFAULT_TOLERANCE,
                         generator: torch.Generator | None = None
                         ) -> tuple[OnnxPolicy | None, str]:
    """Export, load and check against torch on a random input.

    -> (backend, "max |onnx - torch| = ...") when it agrees within `tolerance`, else
    (None, why): a failed export, a missing onnxruntime, or outputs that differ. The
    caller falls back to torch; the reason says what to fix.
    """
    was_training = model.training
    model.eval()
    try:
        generator = generator if generator is not None else torch.Generator().manual_seed(0)
        backend = OnnxPolicy.export(model, threads, generator)
        diff = max_abs_difference(backend, model, generator)
    except ImportError as exc:
        return None, f"onnxruntime is not available ({exc})"
    except Exception as exc:  # noqa: BLE001 - exporter and runtime raise many types; any of them means torch
        return None, f"ONNX export or load failed: {exc!r}"
    finally:
        model.train(was_training)
    if not diff < tolerance:  # also catches NaN
        return None, f"ONNX outputs differ from torch: max |diff| = {diff:.3g} >= {tolerance:g}"
    return backend, f"max |onnx - torch| = {diff:.2g}"
