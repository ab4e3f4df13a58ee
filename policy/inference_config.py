"""How a checkpoint runs, every setting in one frozen dataclass with one default each.

policy_node declares its inference parameters from these fields (description and range, as
`ros2 param describe` shows them), `arm-act eval` / `demo` derive their flags from them, and
in-process evaluation (arm_act.eval.in_process.PolicySettings) extends them. A field's
metadata says how it is checked (`check`), what it is called as a ROS parameter when that
name differs, and whether policy_node applies it live or reads it at configure.

    config = InferenceConfig(assist=True)
    InferenceConfig.check("regrasps", 200)   # -> "regrasps must be in 0 .. 100, not 200"
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INFERENCE_FILE = "inference.json"
"""Beside a checkpoint's config.json: the InferenceConfig it is meant to run with."""

EXECUTIONS = ("ensemble", "queue")
BACKENDS = ("torch", "onnx")
RETRIES = ("reflex", "policy")
GRIPPERS = ("binary", "continuous")


def setting(default: Any, help: str, *, low: float | None = None, high: float | None = None,
            low_open: bool = False, choices: tuple[str, ...] | None = None, ros_name: str | None = None,
            live: bool = False, unit: str = ""):
    """A field of InferenceConfig with what describes and checks it."""
    return field(default=default, metadata={"help": help, "low": low, "high": high, "low_open": low_open,
                                            "choices": choices, "ros_name": ros_name, "live": live, "unit": unit})


@dataclass(frozen=True)
class InferenceConfig:
    """Every setting of the way from camera images to joint commands. assist=False runs the
    network alone: images -> network -> chunk executor -> command limiter."""

    execution: str = setting("ensemble", "chunk executor: ensemble (ACT's temporal ensembling over overlapping "
                             "chunks) or queue (the newest chunk)", choices=EXECUTIONS, live=True)
    ensemble_m: float = setting(0.1, "ensembling weights exp(-m*i), i = 0 the oldest chunk", low=0.0, high=10.0,
                                live=True)
    ensemble_m_after_change: float = setting(
        -1.0, "the ensembling's m for ensemble_after_change_s after a mid-episode change of instruction (< 0: "
        "newer chunks weigh more; the chunks predicted while the arm still moved toward the old goal lean "
        "toward it)", low=-10.0, high=10.0, live=True)
    ensemble_after_change_s: float = setting(
        1.0, "how long ensemble_m_after_change weighs the chunks after a change of instruction; then "
        "ensemble_m again, which smooths the place", low=0.0, high=60.0, live=True, unit="s")
    latency_ticks: int = setting(1, "lockstep: a chunk from the camera pair of tick c is used from tick "
                                 "c + latency_ticks", low=0, high=50, unit="control ticks")
    gripper: str = setting("binary", "gripper command: binary (the executor's opening snapped to fully open above "
                           "the middle of its range, else closed) or continuous (the executor's opening as it "
                           "is; averaged chunks that disagree give a half-open gripper)", choices=GRIPPERS, live=True)
    max_joint_speed: float = setting(3.0, "clamp on commanded joint motion", low=0.0, low_open=True, high=10.0,
                                     live=True, unit="rad/s")
    stale_timeout: float = setting(0.5, "observations older than this make policy_node hold its last command",
                                   low=0.0, low_open=True, high=60.0, live=True, unit="sim s")
    threads: int = setting(1, "intra-op threads of torch or onnxruntime (one: the sim has the other core)",
                           low=1, high=256, ros_name="torch_threads")
    backend: str = setting("torch", "inference backend: torch (eager), or onnx (exported at load, checked "
                           "against torch, falls back to torch)", choices=BACKENDS)
    device: str = setting("cpu", "torch device: cpu, auto (CUDA when present), cuda or cuda:N")
    assist: bool = setting(False, "the hand-written assist around the network: colour balance, aim correction "
                           "onto the target head's estimate, grasp check and re-grasp reflex; false: the "
                           "network alone")
    regrasps: int = setting(3, "with the assist: grasps that closed on nothing reopened, at most, per episode",
                            low=0, high=100)
    retry: str = setting("reflex", "with the assist: how a reopened grasp is retried: reflex (up, over the "
                         "estimate, down, close) or policy (the chunks)", choices=RETRIES, ros_name="regrasp_retry")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(InferenceConfig):
            reason = self.check(f.name, getattr(self, f.name))
            if reason:
                raise ValueError(reason)

    @classmethod
    def check(cls, name: str, value: Any) -> str | None:
        """The reason `value` is refused for the field `name` (its ROS name also works), or None."""
        f = _FIELDS.get(name) or _BY_ROS_NAME.get(name)
        if f is None:
            raise KeyError(f"no inference setting {name!r}")
        meta, shown = f.metadata, name
        if f.type in ("bool", bool):
            return None if isinstance(value, bool) else f"{shown} must be true or false, not {value!r}"
        if meta["choices"] is not None:
            choices = list(meta["choices"])
            return None if value in choices else f"{shown} must be one of {choices}, not {value!r}"
        if f.type in ("int", int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif f.type in ("float", float):
            ok = isinstance(value, float) and math.isfinite(value)
        else:
            return None if isinstance(value, str) and value else f"{shown} must be a non-empty string, not {value!r}"
        low, high = meta["low"], meta["high"]
        if ok and low is not None:
            ok = value > low if meta["low_open"] else value >= low
        if ok and high is not None:
            ok = value <= high
        if ok:
            return None
        return f"{shown} must be {describe_range(f)}, not {value!r}"

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {f.name: f.default for f in dataclasses.fields(cls)}

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(InferenceConfig)}

    @classmethod
    def from_dict(cls, data: Any, where: str = "inference.json") -> InferenceConfig:
        """The config of a parsed inference.json: unknown keys and bad values are refused
        with one line naming them; keys it lacks take their defaults."""
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise ValueError(f"{where}: unknown settings {unknown} (known: {sorted(_FIELDS)})")
        values = dict(data)
        for name, value in values.items():  # JSON writes 3.0 as 3.0 but a hand edit may write 3
            if _FIELDS[name].type in ("float", float) and isinstance(value, int) and not isinstance(value, bool):
                values[name] = float(value)
        try:
            return cls(**values)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None

# How the policy behaves, as opposed to how this machine runs it (threads, backend, device,
# latency_ticks): `arm-act eval` takes these from a checkpoint's inference.json unless given.
BEHAVIOUR = ("execution", "ensemble_m", "ensemble_m_after_change", "ensemble_after_change_s", "gripper",
             "max_joint_speed", "stale_timeout", "assist", "regrasps", "retry")


def save_inference_config(directory, config: InferenceConfig) -> Path:
    """Write DIRECTORY/inference.json (atomically: a reader never sees half a file)."""
    import json
    import os
    import tempfile

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{INFERENCE_FILE}.")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(config.to_dict(), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, out / INFERENCE_FILE)
    return out / INFERENCE_FILE


def load_inference_config(directory) -> InferenceConfig | None:
    """The checkpoint's inference.json, None when it has none (a checkpoint saved before the
    file existed); ValueError naming the file when it cannot be read or holds bad settings."""
    import json

    path = Path(directory) / INFERENCE_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it ({type(exc).__name__}: {exc})") from None
    return InferenceConfig.from_dict(data, where=str(path))


def meta_name(f: dataclasses.Field) -> str:
    """The name a user sets: the ROS parameter's where it differs."""
    return f.metadata["ros_name"] or f.name


def describe_range(f: dataclasses.Field) -> str:
    """'in 0 .. 100', 'in (0, 10] rad/s', 'a finite number >= 0', 'one of [...]' or ''."""
    meta = f.metadata
    if meta["choices"] is not None:
        return f"one of {list(meta['choices'])}"
    low, high, unit = meta["low"], meta["high"], f" {meta['unit']}" if meta["unit"] else ""
    if low is None and high is None:
        return ""
    kind = "a finite number " if f.type in ("float", float) else "a whole number "
    if high is None:
        return f"{kind}{'>' if meta['low_open'] else '>='} {low:g}{unit}"
    if meta["low_open"]:
        return f"in ({low:g}, {high:g}]{unit}"
    return f"in {low:g} .. {high:g}{unit}"


_FIELDS = {f.name: f for f in dataclasses.fields(InferenceConfig)}
_BY_ROS_NAME = {f.metadata["ros_name"]: f for f in _FIELDS.values() if f.metadata["ros_name"]}


def fields() -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(InferenceConfig)
