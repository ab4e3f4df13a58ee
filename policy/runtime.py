"""The runtime that turns a checkpoint into commands, shared by in-process evaluation and
the policy node through ActionSelector (policy/selection.py, which adds the latency rule,
the limiter and the hold; split as LeRobot splits ACTPolicy and ACTTemporalEnsembler).

    runtime = PolicyRuntime.from_checkpoint("checkpoints/default", backend="onnx")
    runtime.reset()
    chunk = runtime.predict_chunk(images, joint_position, instruction)   # on a camera pair
    runtime.add_chunk(start_tick, chunk.actions)                         # when it is usable
    action = runtime.action(tick)                                        # every control tick

Chunks are indexed by absolute control tick: a chunk predicted from the observation of
tick c holds the commands for ticks c, c+1, ..., c+K-1. When it becomes usable only d ticks
later (inference latency), its first d actions are simply in the past. Both executors work
that way, so latency handling is the same for the ensembler and the queue.

backend="onnx" runs the forward pass through an onnxruntime session exported at load
(policy/onnx_backend.py), checked against torch on a random input; when export, loading or
that check fails the runtime warns and stays on torch (`runtime.backend` says which one
runs). Attention weights for viewers (need_attention=True) always come from torch. The
graph is a snapshot of the weights at construction: build a new runtime after changing them.

device ("cpu" by default; "auto", "cuda", "cuda:N", policy/device.py) is where the torch
model runs, in float32; onnxruntime runs on the CPU, so with a CUDA device the runtime uses
torch there instead (`backend_note` says so).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from arm_act.policy.checkpoint import load_checkpoint
from arm_act.policy.colour import ColourBalance
from arm_act.policy.config import PolicyConfig
from arm_act.policy.inference_config import BACKENDS, GRIPPERS
from arm_act.policy.model import ACTPolicy
from arm_act.policy.normalizer import Normalizer

ARM_JOINTS = 7

logger = logging.getLogger(__name__)


def _checked_chunk(chunk: np.ndarray, chunk_size: int, action_dim: int) -> np.ndarray:
    """(K, A) float64 copy of a chunk, or ValueError for a wrong shape or non-finite values."""
    chunk = np.array(chunk, dtype=np.float64)
    if chunk.shape != (chunk_size, action_dim):
        raise ValueError(f"chunk has shape {chunk.shape}, expected {(chunk_size, action_dim)}")
    if not np.all(np.isfinite(chunk)):
        raise ValueError("chunk holds non-finite actions")
    return chunk


ENSEMBLE_INTERVAL_S = 0.1
"""TemporalEnsembler's m is per this much chunk start time (ACT's per-chunk m for chunks that
start every 100 ms: 10 Hz cameras, the rate the policy is trained at)."""


class TemporalEnsembler:
    """ACT's temporal ensembling (Zhao et al. 2023, Sec. IV-B): the action for tick t is the
    weighted average of every stored chunk's prediction for t, with weights exp(-m*i) where
    i = 0 is the OLDEST prediction (as in ACT's reference code: a larger m trusts older
    chunks more and smooths harder).

    i counts chunk start time in units of `interval_ticks` (ENSEMBLE_INTERVAL_S at the control
    rate: 5 ticks at 50 Hz), not chunks: with chunks every 5 ticks it is ACT's chunk index,
    and a faster camera gives more chunks with the same weight over time. Counted in chunks,
    cameras at 50 Hz (a chunk every tick) put the weight on predictions ~40 ticks old where
    10 Hz cameras put it ~25 ticks back: 45/60 episodes against 57/60 (seed 500000, 2-5
    blocks); counted in time, 53/60 (docs/training.md, "Robustness and camera rate").

    Stores at most ceil(K) chunks that still cover the future; O(chunks x A) per tick.
    """

    def __init__(self, m: float, chunk_size: int, action_dim: int, interval_ticks: float = 5.0):
        if not np.isfinite(m):
            raise ValueError(f"ensembling coefficient m={m} must be a finite number")
        if chunk_size < 1 or action_dim < 1:
            raise ValueError(f"chunk_size={chunk_size} and action_dim={action_dim} must be >= 1")
        if not interval_ticks > 0 or not np.isfinite(interval_ticks):
            raise ValueError(f"interval_ticks={interval_ticks} must be a finite number > 0")
        self.m, self.chunk_size, self.action_dim = float(m), int(chunk_size), int(action_dim)
        self.interval_ticks = float(interval_ticks)
        self._chunks: list[tuple[int, np.ndarray]] = []  # (start tick, (K, A)), oldest first
        self._tilt: list | None = None  # [m to go back to, ticks or None, the tilt's first tick or None]

    def reset(self) -> None:
        """No chunks; an unfinished tilt ends and m is what it was before it."""
        self._chunks.clear()
        if self._tilt is not None:
            self.m = self._tilt[0]
            self._tilt = None

    def tilt(self, m: float, ticks: int | None) -> None:
        """Weigh by m for `ticks` control ticks, counted from the next action(), then by the m
        of now again; ticks None: until reset()."""
        if not np.isfinite(m):
            raise ValueError(f"ensembling coefficient m={m} must be a finite number")
        if ticks is not None and ticks < 0:
            raise ValueError(f"ticks={ticks} must be >= 0")
        base = self.m if self._tilt is None else self._tilt[0]
        self.m = float(m)
        self._tilt = [base, None if ticks is None else int(ticks), None]

    def add_chunk(self, start_tick: int, chunk: np.ndarray) -> None:
        chunk = _checked_chunk(chunk, self.chunk_size, self.action_dim)
        self._chunks.append((int(start_tick), chunk))
        self._chunks.sort(key=lambda item: item[0])

    def action(self, tick: int) -> np.ndarray | None:
        """(A,) ensembled action for `tick`, or None when no stored chunk covers it."""
        if self._tilt is not None and self._tilt[1] is not None:
            if self._tilt[2] is None:
                self._tilt[2] = tick
            if tick - self._tilt[2] >= self._tilt[1]:
                self.m, self._tilt = self._tilt[0], None
        self._chunks = [(s, c) for s, c in self._chunks if s + self.chunk_size > tick]
        live = [(s, c[tick - s]) for s, c in self._chunks if s <= tick]
        if not live:
            return None
        starts = np.array([s for s, _ in live], dtype=np.float64)
        weights = np.exp(-self.m * ((starts - starts[0]) / self.interval_ticks))  # i = 0: the oldest chunk
        return (weights[:, None] * np.stack([row for _, row in live])).sum(axis=0) / weights.sum()


class ChunkQueue:
    """Execute the newest chunk: the action for tick t comes from the latest chunk that
    starts at or before t; after its end the last action is held."""

    def __init__(self, chunk_size: int, action_dim: int):
        self.chunk_size, self.action_dim = int(chunk_size), int(action_dim)
        self._current: tuple[int, np.ndarray] | None = None

    def reset(self) -> None:
        self._current = None

    def add_chunk(self, start_tick: int, chunk: np.ndarray) -> None:
        chunk = _checked_chunk(chunk, self.chunk_size, self.action_dim)
        if self._current is None or start_tick >= self._current[0]:
            self._current = (int(start_tick), chunk)

    def action(self, tick: int) -> np.ndarray | None:
        if self._current is None or tick < self._current[0]:
            return None
        start, chunk = self._current
        return chunk[min(tick - start, self.chunk_size - 1)].copy()


def make_executor(execution: str, config: PolicyConfig, m: float = 0.1, control_rate: float = 50.0):
    if execution == "ensemble":
        return TemporalEnsembler(m, config.chunk_size, config.action_dim,
                                 interval_ticks=float(control_rate) * ENSEMBLE_INTERVAL_S)
    if execution == "queue":
        return ChunkQueue(config.chunk_size, config.action_dim)
    raise ValueError(f"execution={execution!r} must be 'ensemble' or 'queue'")


@dataclass
class ChunkPrediction:
    actions: np.ndarray  # (K, A) unnormalised: 7 joint targets (rad) + gripper opening (m)
    latency_s: float  # wall time of the forward pass
    attention: dict[str, np.ndarray] | None  # {camera: (grid, grid)} mean cross-attention
    target: np.ndarray | None = None  # (3,) where the target head places the named block (m)
    # {camera: (grid, grid)}: the instruction's words' mean encoder self-attention over the patches
    instruction_attention: dict[str, np.ndarray] | None = None


class PolicyRuntime:
    """A loaded policy plus its chunk executor."""

    def __init__(self, model: ACTPolicy, normalizer: Normalizer, execution: str = "ensemble",
                 m: float = 0.1, threads: int | None = None, backend: str = "torch",
                 device: str | torch.device = "cpu", control_rate: float = 50.0, colour_balance: bool = False,
                 m_after_change: float | None = None, after_change_s: float | None = None,
                 gripper: str = "binary"):
        """control_rate: Hz of the ticks the executor counts (the ensembling's time unit).
        colour_balance: scale each camera pair to the training light (policy/colour.py) when the
        checkpoint has a colour reference; `self.colour_balance` is None when it does not run.
        m_after_change: the ensembling's m after a goal change (new_goal), None keeps m; for
        after_change_s seconds of control ticks, then m again (None: to the episode's end).
        gripper: binary or continuous, how the executor's gripper opening becomes a command
        (`gripper_command`)."""
        from arm_act.policy.device import resolve_device

        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r} must be one of {list(BACKENDS)}")
        if gripper not in GRIPPERS:
            raise ValueError(f"gripper={gripper!r} must be one of {list(GRIPPERS)}")
        self.gripper = gripper
        self.device = resolve_device(device)  # DeviceError (a ValueError) when it is not there
        self.model = model.eval().to(self.device)
        self.config: PolicyConfig = model.config
        self.normalizer = normalizer
        self.tokenizer = model.tokenizer()
        if threads is not None and threads < 1:
            raise ValueError(f"threads={threads} must be >= 1")
        self.threads = threads
        self.control_rate = float(control_rate)
        self.m = float(m)
        self.m_after_change = self.m if m_after_change is None else float(m_after_change)
        if after_change_s is not None and not (np.isfinite(after_change_s) and after_change_s >= 0):
            raise ValueError(f"after_change_s={after_change_s} must be a finite number >= 0, or None")
        self.after_change_s = after_change_s
        self.executor = make_executor(execution, self.config, m, self.control_rate)
        self.execution = execution
        reference = normalizer.image_reference
        self.colour_balance = None
        if colour_balance and reference is not None:
            if reference["camera"] in self.config.cameras:
                self.colour_balance = ColourBalance(self.config.cameras.index(reference["camera"]),
                                                    reference["median"])
            else:
                logger.warning("colour balance off: the colour reference is of camera %r, the policy's cameras "
                               "are %s", reference["camera"], list(self.config.cameras))
        self._instruction: str | None = None
        self._ids = self._ids_mask = None
        self.requested_backend = backend
        self.backend, self.backend_note, self._onnx = "torch", "", None
        if backend == "onnx" and self.device.type != "cpu":
            self.backend_note = f"onnxruntime runs on the CPU; torch runs the policy on {self.device}"
            logger.info("backend='onnx' with device %s: %s", self.device, self.backend_note)
        elif backend == "onnx":
            from arm_act.policy.onnx_backend import verified_onnx_policy

            self._onnx, self.backend_note = verified_onnx_policy(
                self.model, threads if threads is not None else torch.get_num_threads())
            if self._onnx is None:
                logger.warning("backend='onnx' unavailable, using torch: %s", self.backend_note)
            else:
                self.backend = "onnx"

    def set_control_rate(self, control_rate: float) -> None:
        """Count the executor's ticks at another rate: a fresh, empty executor when it changes."""
        if float(control_rate) != self.control_rate:
            self.control_rate = float(control_rate)
            self.executor = make_executor(self.execution, self.config, self.m, self.control_rate)

    @classmethod
    def from_checkpoint(cls, directory: str | Path, execution: str = "ensemble", m: float = 0.1,
                        threads: int | None = None, cameras: tuple[str, ...] | None = None,
                        image_size: int | None = None, backend: str = "torch",
                        device: str | torch.device = "cpu", control_rate: float = 50.0,
                        colour_balance: bool = False, m_after_change: float | None = None,
                        after_change_s: float | None = None, gripper: str = "binary") -> PolicyRuntime:
        expected = {}
        if cameras is not None:
            expected["cameras"] = list(cameras)
        if image_size is not None:
            expected["image_size"] = image_size
        model, normalizer, _ = load_checkpoint(directory, expected=expected or None)
        return cls(model, normalizer, execution=execution, m=m, threads=threads, backend=backend,
                   device=device, control_rate=control_rate, colour_balance=colour_balance,
                   m_after_change=m_after_change, after_change_s=after_change_s, gripper=gripper)

    def reset(self) -> None:
        """A new episode: no chunks, and the ensembling back at m."""
        self.executor.reset()
        if isinstance(self.executor, TemporalEnsembler):
            self.executor.m = self.m

    def new_goal(self) -> None:
        """The instruction changed mid-episode: no chunks, and the ensembling at m_after_change
        for after_change_s, then at m. The chunks that follow a change are predicted from states
        on the way to the old goal's block; averaged oldest-first, as ACT's m > 0 does, the first
        of them pull the grasp toward that block. After the turn, m > 0 smooths the place again
        (docs/tasks.md, "The ensembling after a change")."""
        self.executor.reset()
        if isinstance(self.executor, TemporalEnsembler):
            self.executor.m = self.m
            ticks = None if self.after_change_s is None else round(self.after_change_s * self.control_rate)
            self.executor.tilt(self.m_after_change, ticks)

    def _instruction_tokens(self, instruction: str):
        if instruction != self._instruction:  # tokenised once per episode, not per frame
            ids, mask = self.tokenizer.encode(instruction)
            self._ids = torch.as_tensor(ids)[None].to(self.device)  # (1, L)
            self._ids_mask = torch.as_tensor(mask)[None].to(self.device)  # (1, L)
            self._instruction = instruction
        return self._ids, self._ids_mask

    def preprocess(self, images: dict[str, np.ndarray],
                   joint_position: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """{camera: (H, W, 3) uint8} + (9,) -> images (1, C, 3, H, W) in [0, 1], state (1, 9);
        the images colour-balanced when self.colour_balance is set."""
        size = self.config.image_size
        frames = []
        for name in self.config.cameras:
            if name not in images:
                raise ValueError(f"missing camera {name!r}; got {sorted(images)}")
            rgb = images[name]
            if rgb.shape != (size, size, 3) or rgb.dtype != np.uint8:
                raise ValueError(f"camera {name!r} image is {rgb.shape} {rgb.dtype}, "
                                 f"expected ({size}, {size}, 3) uint8")
            frames.append(rgb)
        stacked = torch.from_numpy(np.stack(frames))  # (C, H, W, 3) uint8, a fresh copy
        pixels = stacked.permute(0, 3, 1, 2).float().div_(255.0)[None]  # (1, C, 3, H, W)
        if self.colour_balance is not None:
            pixels = self.colour_balance(pixels)  # (1, C, 3, H, W)
        position = np.asarray(joint_position, dtype=np.float64)
        if position.shape != (self.config.state_dim,) or not np.all(np.isfinite(position)):
            raise ValueError(f"joint position must be {self.config.state_dim} finite values, got {position}")
        state = torch.as_tensor(self.normalizer.normalize_state(position), dtype=torch.float32)[None]  # (1, S)
        return pixels, state

    @torch.inference_mode()
    def predict_chunk(self, images: dict[str, np.ndarray], joint_position: np.ndarray, instruction: str,
                      need_attention: bool = False) -> ChunkPrediction:
        # torch's intra-op thread count is per calling thread (OpenMP), and the node calls
        # from a worker thread: set it where the work runs. Equal thread counts also make
        # results bit-identical between the node and in-process evaluation.
        if self.threads is not None and torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        pixels, state = self.preprocess(images, joint_position)
        if self.device.type != "cpu":
            pixels, state = pixels.to(self.device), state.to(self.device)
        ids, ids_mask = self._instruction_tokens(instruction)
        start = time.perf_counter()
        cross_attention = target = words = None
        if self._onnx is not None and not need_attention:
            normalised, target = self._onnx.predict(pixels, state, ids, ids_mask)  # (1, K, A), (3,) m or None
        else:
            out = self.model(pixels, state, ids, ids_mask, need_weights=need_attention)
            normalised = out.actions.cpu()
            cross_attention = None if out.cross_attention is None else out.cross_attention.cpu()
            if out.instruction_attention is not None:  # (1, H, L, N): the real words, over heads
                words = out.instruction_attention[0].mean(dim=0)[ids_mask[0].cpu()].mean(dim=0).cpu()  # (N,)
            if out.target is not None:
                target = out.target[0].double().cpu().numpy()  # (3,) m
        latency = time.perf_counter() - start
        actions = self.normalizer.unnormalize_action(normalised[0].double().numpy())  # (K, A)
        if not np.all(np.isfinite(actions)):
            raise FloatingPointError("the policy produced non-finite actions")
        attention = None
        if need_attention and cross_attention is not None:
            mean = cross_attention[0].mean(dim=(0, 1))  # (N,) over heads and queries
            attention = {k: v.numpy() for k, v in self.model.layout.patch_grids(mean).items()}
        instruction_attention = None
        if words is not None:
            instruction_attention = {k: v.numpy() for k, v in self.model.layout.patch_grids(words).items()}
        return ChunkPrediction(np.asarray(actions, dtype=np.float64), latency, attention, target,
                               instruction_attention)

    def add_chunk(self, start_tick: int, actions: np.ndarray) -> None:
        self.executor.add_chunk(start_tick, actions)

    def action(self, tick: int) -> tuple[np.ndarray, float] | None:
        """(arm (7,), gripper opening) for the tick, or None before the first usable chunk."""
        action = self.executor.action(tick)
        if action is None:
            return None
        return action[:ARM_JOINTS].copy(), gripper_command(float(action[ARM_JOINTS]), self.gripper)


def gripper_command(opening: float, mode: str) -> float:
    """The gripper command for the executor's opening (m). continuous: the opening itself.
    binary: fully open above the middle of GRIPPER_RANGE, else closed. The executor averages
    overlapping chunks; where some chunks close the gripper and others open it (after a grasp
    that missed), the average is a half-open command that neither grasps nor lets go, and the
    arm hovers. Snapped, the command follows the chunks' majority by weight: a decision, as a
    two-class gripper output would give."""
    if mode == "continuous":
        return opening
    low, high = GRIPPER_RANGE
    return high if opening > 0.5 * (low + high) else low


def measure_latency_ticks(runtime: PolicyRuntime, control_rate: float, calls: int = 50,
                          warmup: int = 3) -> tuple[int, float, list[float]]:
    """This machine's batch-1 inference latency: the median of `calls` inferences after
    `warmup` ones, as whole control ticks rounded up (at least 1) and in seconds, with every
    call's time (s). The median over many calls ignores a few stalled ones; the default
    latency model of `arm-act eval`."""
    cfg = runtime.config
    rng = np.random.default_rng(0)
    images = {c: rng.integers(0, 256, (cfg.image_size, cfg.image_size, 3), dtype=np.uint8) for c in cfg.cameras}
    position = np.asarray(runtime.normalizer.to_dict()["state_mean"], dtype=np.float64)
    for _ in range(warmup):
        runtime.predict_chunk(images, position, "put the red block in the box")
    times = [runtime.predict_chunk(images, position, "put the red block in the box").latency_s for _ in range(calls)]
    median = float(np.median(times))
    return max(1, int(np.ceil(median * control_rate))), median, times


def latency_warning(ticks: int, times: list[float], load_per_cpu: float) -> str | None:
    """Why a measured latency may not describe this machine, or None: more than one control
    tick (inference normally fits one period), or a load average above the CPUs, or calls
    that vary more than threefold between the fastest and slowest tenth."""
    p10, p90 = (float(np.percentile(times, q)) for q in (10, 90))
    problems = []
    if ticks > 1:
        problems.append(f"{ticks} control ticks (more than the one inference normally takes)")
    if load_per_cpu > 1.0:
        problems.append(f"load average {load_per_cpu:.2f} per CPU")
    if p10 > 0 and p90 / p10 > 3.0:
        problems.append(f"calls from {p10 * 1e3:.1f} to {p90 * 1e3:.1f} ms (p10-p90)")
    if not problems:
        return None
    return ("the measured inference latency may not describe this machine: " + "; ".join(problems)
            + ". Results are comparable only at the same latency: fix it with --latency-ticks")


# Joint limits and velocity limits of pybullet_data's franka_panda/panda.urdf (the arm the
# sim loads), repeated here because policy/ must not import PyBullet.
ARM_LOWER = np.array([-2.9671, -1.8326, -2.9671, -3.1416, -2.9671, -0.0873, -2.9671])
ARM_UPPER = np.array([2.9671, 1.8326, 2.9671, 0.0, 2.9671, 3.8223, 2.9671])
GRIPPER_RANGE = (0.0, 0.04)


class CommandLimiter:
    """Safety on the way out: clamp commands to the joint limits and move each joint at most
    max_joint_speed * dt from the previous command (a policy glitch can never jump the arm).
    Shared by the policy node and in-process evaluation, so both execute the same commands."""

    def __init__(self, max_joint_speed: float, control_rate: float):
        if not max_joint_speed > 0 or not control_rate > 0:
            raise ValueError(f"max_joint_speed={max_joint_speed} and control_rate={control_rate} must be > 0")
        self.max_step = float(max_joint_speed) / float(control_rate)
        self._previous: np.ndarray | None = None
        self.clamped = 0  # commands changed by a joint limit or the speed bound since reset

    def reset(self, arm: np.ndarray | None = None) -> None:
        self._previous = None if arm is None else np.asarray(arm, dtype=np.float64).copy()
        self.clamped = 0

    def __call__(self, arm: np.ndarray, gripper: float) -> tuple[np.ndarray, float]:
        wanted = np.asarray(arm, dtype=np.float64)
        target = np.clip(wanted, ARM_LOWER, ARM_UPPER)
        if self._previous is not None:
            target = np.clip(target, self._previous - self.max_step, self._previous + self.max_step)
        self._previous = target
        if not np.array_equal(target, wanted):
            self.clamped += 1
        return target.copy(), float(np.clip(gripper, *GRIPPER_RANGE))

    def diagnostics(self) -> dict[str, int]:
        return {"commands_clamped": self.clamped}
