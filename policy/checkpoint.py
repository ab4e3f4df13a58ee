"""Checkpoint directories that describe themselves and load strictly.

    model.safetensors   weights (no pickle), with the policy config in its metadata
    config.json         {"format", "format_version", "policy": PolicyConfig, "weights_sha256"}
    normalization.json  Normalizer.to_dict()
    metrics.json        optional: how it was trained and how it scored

Loading never unpickles. Every way a checkpoint can disagree with itself (weights vs
config, config.json vs the config the weights were saved with, statistics vs dimensions,
checksum) is a CheckpointError that names the file and what differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from arm_act.policy.config import PolicyConfig
from arm_act.policy.inference_config import INFERENCE_FILE, InferenceConfig, save_inference_config
from arm_act.policy.model import ACTPolicy
from arm_act.policy.normalizer import Normalizer

FORMAT = "arm_act.policy"
FORMAT_VERSION = 1
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
NORMALIZATION_FILE = "normalization.json"
METRICS_FILE = "metrics.json"


class CheckpointError(Exception):
    """A checkpoint directory is missing, corrupt or inconsistent."""


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _json_bytes(data: Any, what: str) -> bytes:
    try:
        return (json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be JSON-serialisable with finite numbers: {exc}") from exc


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save_checkpoint(directory: str | os.PathLike, model: ACTPolicy, normalizer: Normalizer,
                    metrics: Mapping[str, Any] | None = None, inference: InferenceConfig | None = None) -> Path:
    """Write the checkpoint directory (created if needed; files replaced atomically), with
    inference.json: `inference`, else the defaults, unless the directory has one already
    (a retrained checkpoint keeps how it was meant to run)."""
    cfg = model.config
    if (normalizer.state_dim, normalizer.action_dim) != (cfg.state_dim, cfg.action_dim):
        raise ValueError(f"normalizer dims (state {normalizer.state_dim}, action "
                         f"{normalizer.action_dim}) do not match the config (state "
                         f"{cfg.state_dim}, action {cfg.action_dim})")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    meta = {"format": FORMAT, "format_version": str(FORMAT_VERSION),
            "policy_config": json.dumps(cfg.to_dict(), sort_keys=True)}
    fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{MODEL_FILE}.")
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=meta)
        sha = _sha256(Path(tmp))
        os.replace(tmp, out / MODEL_FILE)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    config_json = {"format": FORMAT, "format_version": FORMAT_VERSION,
                   "policy": cfg.to_dict(), "weights_sha256": sha}
    _write_atomic(out / CONFIG_FILE, _json_bytes(config_json, CONFIG_FILE))
    _write_atomic(out / NORMALIZATION_FILE, _json_bytes(normalizer.to_dict(), NORMALIZATION_FILE))
    if metrics is not None:
        _write_atomic(out / METRICS_FILE, _json_bytes(dict(metrics), METRICS_FILE))
    if inference is not None or not (out / INFERENCE_FILE).is_file():
        save_inference_config(out, inference or InferenceConfig())
    return out


def save_normalization(directory: str | os.PathLike, normalizer: Normalizer) -> None:
    """Replace a checkpoint's normalization.json (the weights and their checksum stay); for
    statistics added after training, such as the colour reference (policy/colour.py)."""
    _write_atomic(Path(directory) / NORMALIZATION_FILE, _json_bytes(normalizer.to_dict(), NORMALIZATION_FILE))


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing")
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from exc


def _describe(diffs: Mapping[str, tuple[Any, Any]], left: str, right: str) -> str:
    return "; ".join(f"{k}: {left} {a!r} vs {right} {b!r}" for k, (a, b) in diffs.items())


def read_config(directory: str | os.PathLike) -> PolicyConfig:
    """The PolicyConfig of a checkpoint directory (config.json only; no weights read)."""
    return _read_config(Path(directory))[0]


def _read_config(root: Path) -> tuple[PolicyConfig, str]:
    path = root / CONFIG_FILE
    data = _read_json(path)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    allowed = {"format", "format_version", "policy", "weights_sha256"}
    if set(data) != allowed:
        raise CheckpointError(f"{path}: keys missing {sorted(allowed - set(data))}, "
                              f"unknown {sorted(set(data) - allowed)}")
    if data["format"] != FORMAT or data["format_version"] != FORMAT_VERSION:
        raise CheckpointError(f"{path}: format {data['format']!r} version "
                              f"{data['format_version']!r}, expected {FORMAT!r} version "
                              f"{FORMAT_VERSION}")
    try:
        config = PolicyConfig.from_dict(data["policy"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: invalid policy config: {exc}") from exc
    return config, str(data["weights_sha256"])


def _check_expected(root: Path, config: PolicyConfig, expected: Mapping[str, Any]) -> None:
    try:
        wanted = PolicyConfig.from_dict({**config.to_dict(), **dict(expected)})
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{root}: bad expected config {dict(expected)!r}: {exc}") from exc
    diffs = config.differences(wanted)
    if diffs:
        raise CheckpointError(f"checkpoint {root} does not match what the caller expects: "
                              + _describe(diffs, "checkpoint", "expected"))


def _read_weights(root: Path, config: PolicyConfig, sha: str) -> dict[str, torch.Tensor]:
    path = root / MODEL_FILE
    if not path.is_file():
        raise CheckpointError(f"{path} is missing")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        tensors = load_file(str(path))
    except Exception as exc:  # safetensors raises its own error types for corrupt files
        raise CheckpointError(f"{path} is not a readable safetensors file: {exc}") from exc
    try:
        saved = PolicyConfig.from_dict(json.loads(meta["policy_config"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path} has no valid policy config in its metadata: "
                              f"{exc}") from exc
    diffs = saved.differences(config)
    if diffs:
        raise CheckpointError(f"{root / CONFIG_FILE} does not match the config saved with "
                              f"{path}: " + _describe(diffs, "weights", "config.json"))
    if _sha256(path) != sha:
        raise CheckpointError(f"{path} does not match the weights_sha256 in "
                              f"{root / CONFIG_FILE} (corrupt or replaced file)")
    return tensors


def _check_state_dict(path: Path, model: ACTPolicy, tensors: Mapping[str, torch.Tensor]) -> None:
    want = model.state_dict()
    missing, unexpected = sorted(set(want) - set(tensors)), sorted(set(tensors) - set(want))
    shapes = [f"{k}: file {tuple(tensors[k].shape)} vs model {tuple(want[k].shape)}"
              for k in sorted(set(want) & set(tensors)) if tensors[k].shape != want[k].shape]
    problems = []
    if missing:
        problems.append(f"missing keys {missing}")
    if unexpected:
        problems.append(f"unexpected keys {unexpected}")
    if shapes:
        problems.append("shape mismatches " + "; ".join(shapes))
    bad = sorted(k for k, v in tensors.items()
                 if v.is_floating_point() and not bool(torch.isfinite(v).all()))
    if bad:
        problems.append(f"non-finite values in {bad}")
    if problems:
        raise CheckpointError(f"{path} does not fit the model its config describes: "
                              + "; ".join(problems))


def load_checkpoint(directory: str | os.PathLike, *, expected: Mapping[str, Any] | None = None,
                    device: torch.device | str = "cpu"
                    ) -> tuple[ACTPolicy, Normalizer, PolicyConfig]:
    """Load (model in eval mode on `device`, normalizer, config), strictly.

    expected: config fields the caller relies on, e.g. {"cameras": ["front", "wrist"],
    "image_size": 96}; a difference is a CheckpointError naming each field.
    """
    root = Path(directory)
    if not root.is_dir():
        raise CheckpointError(f"checkpoint directory {root} does not exist")
    config, sha = _read_config(root)
    if expected:
        _check_expected(root, config, expected)
    norm_path = root / NORMALIZATION_FILE
    try:
        normalizer = Normalizer.from_dict(_read_json(norm_path))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{norm_path}: {exc}") from exc
    if (normalizer.state_dim, normalizer.action_dim) != (config.state_dim, config.action_dim):
        raise CheckpointError(f"{norm_path}: statistics for state {normalizer.state_dim} / "
                              f"action {normalizer.action_dim} values, config has "
                              f"{config.state_dim} / {config.action_dim}")
    tensors = _read_weights(root, config, sha)
    model = ACTPolicy(config)
    _check_state_dict(root / MODEL_FILE, model, tensors)
    model.load_state_dict(tensors, strict=True)
    return model.to(device).eval(), normalizer, config


def read_metrics(directory: str | os.PathLike) -> dict[str, Any] | None:
    """metrics.json as a dict, or None when the checkpoint has none."""
    path = Path(directory) / METRICS_FILE
    if not path.exists():
        return None
    data = _read_json(path)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return data

