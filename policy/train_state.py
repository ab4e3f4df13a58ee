"""The resumable training state: out_dir/train_state/, replaced as a whole at each save.

    model.safetensors      the weights
    optimizer.safetensors  AdamW's per-parameter tensors ("optim.<param id>.<name>"), the
                           generator states ("rng.generator", "rng.torch") and the sampling
                           order of the current epoch ("sampler.order")
    state.json             step, configs, normalization, data fingerprint, AdamW's
                           hyper-parameters (param_groups), loss history

Nothing is pickled (as for checkpoints, docs/architecture.md "Formats"): tensors go to safetensors,
everything else to JSON.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from arm_act.policy.config import PolicyConfig

logger = logging.getLogger(__name__)

STATE_DIR = "train_state"
STATE_FORMAT = "arm_act.train_state"
STATE_VERSION = 1
REQUIRED_TENSORS = ("rng.generator", "rng.torch", "sampler.order")
# Training settings that may change between a run and its resume: they decide how long to
# train and how often to report, not what a step computes. (A different `steps` moves the
# cosine schedule's end, so the resumed run is then no longer the uninterrupted one.)
RESUMABLE_CHANGES = ("steps", "val_every", "checkpoint_every", "log_every", "threads",
                     "val_samples")


class TrainingError(Exception):
    """Training cannot start or continue; the message says why and what is kept."""


@dataclass
class SavedState:
    path: Path
    model: dict[str, torch.Tensor]
    tensors: dict[str, torch.Tensor]  # optimizer, generators, sampling order
    state: dict[str, Any]  # state.json

    @property
    def step(self) -> int:
        return int(self.state["step"])


def _flatten_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list]:
    sd = optimizer.state_dict()
    tensors = {}
    for pid, entries in sd["state"].items():
        for key, value in entries.items():
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"optimizer state {key!r} is a {type(value).__name__}, "
                                "not a tensor")
            tensors[f"optim.{pid}.{key}"] = value.detach().to("cpu").clone().contiguous()
    return tensors, sd["param_groups"]


def restore_optimizer(optimizer: torch.optim.Optimizer, saved: SavedState) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in saved.tensors.items():
        if name.startswith("optim."):
            _, pid, key = name.split(".", 2)
            state.setdefault(int(pid), {})[key] = value
    groups = [dict(g) for g in saved.state["param_groups"]]
    for group in groups:
        if "betas" in group:
            group["betas"] = tuple(group["betas"])  # JSON made the tuple a list
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def save_train_state(out_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                     extra_tensors: Mapping[str, torch.Tensor], state: Mapping[str, Any]) -> Path:
    """Write out_dir/train_state: a new directory renamed into place, so a crash leaves
    either the previous state or the new one, never a mixture."""
    final = out_dir / STATE_DIR
    tmp, old = out_dir / f".{STATE_DIR}.tmp", out_dir / f".{STATE_DIR}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # On the CPU whatever device trained: a state saved on a GPU resumes anywhere.
    weights = {k: v.detach().to("cpu").clone().contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(tmp / "model.safetensors"))
    optim_tensors, groups = _flatten_optimizer(optimizer)
    save_file({**optim_tensors, **{k: v.to("cpu").contiguous() for k, v in extra_tensors.items()}},
              str(tmp / "optimizer.safetensors"))
    body = {"format": STATE_FORMAT, "version": STATE_VERSION, **state, "param_groups": groups}
    (tmp / "state.json").write_text(json.dumps(body, indent=1, sort_keys=True, allow_nan=False))
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def find_train_state(out_dir: Path) -> Path | None:
    """out_dir/train_state, or the previous one when a save was cut off between renames."""
    final, old = out_dir / STATE_DIR, out_dir / f".{STATE_DIR}.old"
    if final.is_dir():
        return final
    if old.is_dir():
        logger.warning("using %s (a checkpoint write was interrupted)", old)
        return old
    return None


def remove_train_state(out_dir: Path) -> None:
    for name in (STATE_DIR, f".{STATE_DIR}.old", f".{STATE_DIR}.tmp"):
        shutil.rmtree(out_dir / name, ignore_errors=True)


def saved_step(path: Path) -> int | None:
    """The step of a saved state, None when unreadable (for messages only)."""
    try:
        return int(json.loads((path / "state.json").read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_train_state(path: Path) -> SavedState:
    """Read a train_state directory; TrainingError for anything missing or unreadable."""
    hint = "delete it or train with --no-resume"
    for name in ("model.safetensors", "optimizer.safetensors", "state.json"):
        if not (path / name).is_file():
            raise TrainingError(f"incomplete training state {path}: {name} is missing ({hint})")
    try:
        state = json.loads((path / "state.json").read_text())
        model = load_file(str(path / "model.safetensors"))
        tensors = load_file(str(path / "optimizer.safetensors"))
    except Exception as exc:  # noqa: BLE001 - JSON or safetensors damage: one line
        raise TrainingError(f"training state {path} is unreadable ({type(exc).__name__}: "
                            f"{exc}); {hint}") from None
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise TrainingError(f"{path / 'state.json'} is not an {STATE_FORMAT} file ({hint})")
    if state.get("version") != STATE_VERSION:
        raise TrainingError(f"{path}: training state version {state.get('version')!r}, this "
                            f"code reads version {STATE_VERSION} ({hint})")
    if not isinstance(state.get("normalization"), dict):
        raise TrainingError(f"{path / 'state.json'} has no normalization statistics ({hint})")
    missing = [k for k in REQUIRED_TENSORS if k not in tensors]
    missing += [k for k in ("step", "sampler_pos", "param_groups", "history", "policy", "train")
                if k not in state]
    if missing:
        raise TrainingError(f"training state {path} lacks {missing} ({hint})")
    return SavedState(path, model, tensors, state)


def describe_differences(diffs: Mapping[str, tuple[Any, Any]]) -> str:
    return "; ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in diffs.items())


def check_resumable(saved: SavedState, policy_config: PolicyConfig,
                    train_config: Mapping[str, Any], fingerprint: str) -> None:
    """TrainingError unless `saved` was made with these configs (up to RESUMABLE_CHANGES)
    from the same data."""
    where = "use another --out or --no-resume"
    try:
        saved_policy = PolicyConfig.from_dict(saved.state["policy"])
    except (TypeError, ValueError) as exc:
        raise TrainingError(f"{saved.path}: invalid saved policy config ({exc}); {where}") from None
    diffs = saved_policy.differences(policy_config)
    if diffs:
        raise TrainingError(f"training state {saved.path} is for another policy config "
                            f"({describe_differences(diffs)}); {where}")
    before = saved.state["train"]
    tdiffs = {k: (before.get(k), v) for k, v in train_config.items()
              if before.get(k) != v and k not in RESUMABLE_CHANGES}
    if tdiffs:
        raise TrainingError(f"training state {saved.path} was made with other training "
                            f"settings ({describe_differences(tdiffs)}); {where}")
    if saved.state.get("data_fingerprint") != fingerprint:
        raise TrainingError(f"training state {saved.path} was made from other data (the "
                            f"episodes differ); {where}")
    if before.get("steps") != train_config["steps"]:
        logger.warning("resuming with steps=%s instead of %s: the learning-rate schedule "
                       "changes from here on", train_config["steps"], before.get("steps"))
