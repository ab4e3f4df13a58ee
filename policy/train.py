"""Training the policy on demonstration episodes: AdamW, linear warm-up then cosine decay,
L1 on the action chunk (+ KL for the CVAE), an episode-level validation split, resumable
state, and at the end the checkpoint the runtime loads, loss curves and metrics.json.

    metrics = train(episodes, PolicyConfig(), TrainConfig(steps=3000), "checkpoints/run1")

Determinism: one torch.Generator (seeded from TrainConfig.seed) draws the sampling order,
the augmentation and the CVAE noise; dropout draws from torch's global generator, which is
seeded here as well, inside torch.random.fork_rng so the caller's state is untouched. Both
generator states are saved with the training state (policy/train_state.py), so N steps in
one run and N/2 + N/2 with a resume in between give bit-identical weights (tested).

Devices and processes (`device`, policy/device.py; torchrun, policy/distributed.py): on a
GPU the model trains there, under bf16 autocast where the GPU supports it, with batches
prepared on a thread, pinned and copied without blocking (policy/batches.py). Under
torchrun each process trains on its slice of every global batch (DDP averages the
gradients, so every rank holds the same weights after every step); rank 0 alone
validates and writes train_state, the checkpoint, the curves and metrics.json. Those
runs draw their randomness per step (policy/batches.py), which is what lets a resume use
another number of processes. The single-process CPU run keeps the order of draws above,
so its weights are those of earlier versions, bit for bit (tests/test_train_golden.py).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arm_act.policy.batches import BatchStream, Sampler, StreamState, step_seed
from arm_act.policy.budget import torch_threads
from arm_act.policy.checkpoint import CheckpointError, load_checkpoint, read_config, save_checkpoint
from arm_act.policy.config import PolicyConfig
from arm_act.policy.data import ChunkDataset, fit_normalizer, release_pages, split_episodes
from arm_act.policy.device import DeviceError, amp_dtype, autocast
from arm_act.policy.distributed import (
    DEFAULT_TIMEOUT_S,
    DistributedError,
    World,
    barrier,
    check_in_sync,
    mean_over_ranks,
    process_group,
    weights_digest,
    world_from_env,
)
from arm_act.policy.model import ACTPolicy, chunk_l1, target_error
from arm_act.policy.normalizer import Normalizer
from arm_act.policy.train_config import TrainConfig, lr_at
from arm_act.policy.train_state import (
    STATE_DIR,
    SavedState,
    TrainingError,
    check_resumable,
    describe_differences,
    find_train_state,
    load_train_state,
    remove_train_state,
    restore_optimizer,
    save_train_state,
    saved_step,
)

__all__ = ["TrainConfig", "TrainingError", "evaluate", "lr_at", "plot_losses", "train"]

logger = logging.getLogger(__name__)

CURVES_FILE = "loss_curves.png"
# AdamW's implementation: "fused" (one vectorised kernel per parameter: 1.3 ms a step of the
# shipped config on one core, against 4.2 ms for "foreach", the multi-tensor update, and 4.6 ms
# for "loop", the per-parameter loop; "foreach" and "loop" give the same weights bit for bit,
# "fused" rounds differently, within noise). The others stay for the comparisons
# (arm_act/bench/train_speed.py's `before`, tests/test_train_golden.py's pre-issue-15 hashes).
OPTIMIZER = "fused"
OPTIMIZERS = ("fused", "foreach", "loop")


def optimizer_flags(kind: str | None = None) -> dict[str, bool]:
    """AdamW's fused/foreach keyword arguments for OPTIMIZER (or `kind`)."""
    kind = OPTIMIZER if kind is None else kind
    if kind not in OPTIMIZERS:
        raise ValueError(f"optimizer implementation {kind!r}: expected one of {', '.join(OPTIMIZERS)}")
    return {"fused": kind == "fused", "foreach": kind == "foreach"}


def data_fingerprint(episodes: Sequence) -> str:
    """A hash of the training data (instructions, ticks, states, commands, image shapes and
    a strided sample of pixels): resuming on other data is refused."""
    h = hashlib.sha256()
    for e in episodes:
        images = np.asarray(e.images)
        h.update(e.instruction.encode())
        h.update(str(images.shape).encode())
        h.update(np.ascontiguousarray(images.reshape(-1)[::997]).tobytes())
        release_pages(e.images)  # the stride touches every page of a memory-mapped episode
        for arr in (e.frame_ticks, e.frame_state, e.commands):
            h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


@torch.no_grad()
def evaluate(model: ACTPolicy, dataset: ChunkDataset, index: torch.Tensor,
             batch_size: int, device: torch.device | None = None,
             amp: torch.dtype | None = None) -> dict[str, float | None]:
    """Chunk L1 (normalised units) over the samples `index`, predicted as the runtime
    does: eval mode, no augmentation, and for the CVAE the prior's mean z = 0; with a
    target head also its error in cm (mean |error| per coordinate) and how often it picks
    the patch holding the named block (where the data says), else None; with a place head also
    "place_cm", its error where the place is known.
    device/amp: where the model is and its autocast dtype (None: CPU, float32).
    -> {"l1": ..., "target_cm": ..., "patch_acc": ...}"""
    was_training = model.training
    model.eval()
    total = count = 0.0
    target_total = target_count = place_total = place_count = 0.0
    hits = known_patches = 0
    try:
        for start in range(0, len(index), batch_size):
            batch = dataset.batch(index[start:start + batch_size])
            if device is not None and device.type != "cpu":
                batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            with autocast(device or torch.device("cpu"), amp):
                out = model(batch["images"], batch["state"], batch["instruction_ids"],
                            batch["instruction_mask"])
            valid = float(batch["action_mask"].sum()) * out.actions.shape[-1]
            total += float(chunk_l1(out.actions, batch["actions"], batch["action_mask"])) * valid
            count += valid
            if out.target is not None:
                known = float(torch.isfinite(batch["target"]).all(dim=-1).sum())
                target_total += float(target_error(out.target, batch["target"])) * known
                target_count += known
            if out.target_logits is not None:
                patch = batch["target_patch"]  # (B, C), -1 = unknown
                hits += int(((out.target_logits.argmax(dim=-1) == patch) & (patch >= 0)).sum())
                known_patches += int((patch >= 0).sum())
            if out.place is not None:
                known = float(torch.isfinite(batch["place"]).all(dim=-1).sum())
                place_total += float(target_error(out.place, batch["place"])) * known
                place_count += known
    finally:
        model.train(was_training)
    target_cm = 100.0 * target_total / target_count if target_count else None
    patch_acc = hits / known_patches if known_patches else None
    result = {"l1": total / max(count, 1.0), "target_cm": target_cm, "patch_acc": patch_acc}
    if place_count:
        result["place_cm"] = 100.0 * place_total / place_count
    return result


def plot_losses(history: Mapping[str, list], path: Path, title: str) -> None:
    """Train and val L1 over steps (log scale; KL on a second axis for the CVAE) and, with a
    target head, the named block's position error in a second panel, as a PNG drawn on an
    Agg canvas (no display, no pyplot global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    target = {part: [(p["step"], p["target_cm"]) for p in history[part] if "target_cm" in p]
              for part in ("train", "val")}
    target["grounding"] = [(p["step"], p["grounding_cm"]) for p in history["val"] if "grounding_cm" in p]
    panels = 2 if target["train"] or target["val"] else 1
    fig = Figure(figsize=(7 * panels, 4), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, panels, 1)
    if history["train"]:
        points = [(p["step"], p["l1"]) for p in history["train"]]
        ax.plot(*zip(*points, strict=True), lw=1, marker="." if len(points) < 50 else None, label="train L1")
    if history["val"]:
        ax.plot(*zip(*[(p["step"], p["l1"]) for p in history["val"]], strict=True), "o-", lw=1.5, ms=3,
                label="val L1 (as at inference)")
    kl = [(p["step"], p["kl"]) for p in history["train"] if p.get("kl") is not None]
    if kl:
        ax2 = ax.twinx()
        ax2.plot(*zip(*kl, strict=True), color="tab:gray", lw=0.8, label="train KL")
        ax2.set_ylabel("KL")
        ax2.legend(loc="upper center")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("chunk L1 (normalised units)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right")
    if panels == 2:
        bx = fig.add_subplot(1, 2, 2)
        labels = {"train": "train (all frames)", "val": "val demonstrations (all frames)",
                  "grounding": "val grounding layouts (from the images alone)"}
        for part, style in (("train", "-"), ("val", "o-"), ("grounding", "s-")):
            if target[part]:
                bx.plot(*zip(*target[part], strict=True), style, lw=1, ms=3, label=labels[part])
        bx.set_yscale("log")
        bx.set_xlabel("step")
        bx.set_ylabel("cm (mean |error| per coordinate)")
        bx.set_title("where is the named block? (auxiliary head)")
        bx.grid(True, which="both", alpha=0.3)
        bx.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path)


@dataclass
class _Snapshot:
    """The random state at the start of a step: what a Ctrl-C during it saves."""

    step: int
    generator: torch.Tensor
    torch_rng: torch.Tensor
    order: torch.Tensor
    pos: int


class _NonFiniteError(Exception):
    def __init__(self, step: int, values: Mapping[str, float]):
        super().__init__(step)
        self.step, self.values = step, dict(values)


class _LossModule(torch.nn.Module):
    """model.loss as a forward(), so DistributedDataParallel (which hooks forward) can wrap it."""

    def __init__(self, model: ACTPolicy):
        super().__init__()
        self.model = model

    def forward(self, batch: Mapping[str, torch.Tensor], generator: torch.Generator | None = None):
        return self.model.loss(batch, generator=generator)


class _Trainer:
    """One training run's objects and loop; used only inside train()'s RNG and thread
    contexts.

    Two ways to draw a step's randomness: the single-process CPU run draws the sampling
    order, augmentation and CVAE noise from one generator in turn (the original order,
    kept bit for bit); `streamed` runs (several processes, a GPU, or prefetching) draw only
    the sampling order from it and seed the rest per (step, rank) (policy/batches.py)."""

    def __init__(self, cfg: PolicyConfig, tcfg: TrainConfig, out: Path, normalizer: Normalizer,
                 train_set: ChunkDataset, val_set: ChunkDataset | None, fingerprint: str,
                 ground_val_set: ChunkDataset | None = None, world: World | None = None,
                 amp: torch.dtype | None = None, prefetch: int = 0, sync_every: int = 0):
        self.cfg, self.tcfg, self.out = cfg, tcfg, out
        self.world = world or World()
        self.device, self.amp, self.prefetch = self.world.device, amp, int(prefetch)
        self.streamed = self.world.distributed or self.device.type != "cpu" or self.prefetch > 0
        self.sync_every, self.sync_checks = int(sync_every), 0
        self.ground_val_set = ground_val_set
        self.grounding_train = int((~train_set.has_actions).sum())  # frames, one per grounding layout
        self.normalizer, self.fingerprint = normalizer, fingerprint
        self.train_set, self.val_set = train_set, val_set
        torch.manual_seed(tcfg.seed)  # the global generator: initial weights and dropout
        self.model = ACTPolicy(cfg).train().to(self.device)
        # Weight decay only on the matrices of linear maps, not on biases, norms,
        # embeddings and queries (nanoGPT's configure_optimizers rule).
        linear = {id(m.weight) for m in self.model.modules() if isinstance(m, torch.nn.Linear)}
        params = list(self.model.parameters())
        self.optimizer = torch.optim.AdamW(
            [{"params": [p for p in params if id(p) in linear], "weight_decay": tcfg.weight_decay},
             {"params": [p for p in params if id(p) not in linear], "weight_decay": 0.0}],
            lr=tcfg.lr, **optimizer_flags())
        self.generator = torch.Generator().manual_seed(tcfg.seed)
        self.sampler = Sampler(len(train_set), self.generator)
        self.stream_state: StreamState | None = None  # streamed: the stream after the last step's batch
        self.stream: BatchStream | None = None
        self._plain_loss = _LossModule(self.model)
        self.loss_module: torch.nn.Module = self._plain_loss
        if self.world.distributed:
            from torch.nn.parallel import DistributedDataParallel

            # Its constructor broadcasts rank 0's weights, so every rank starts identical.
            # gradient_as_bucket_view: the gradients live in DDP's all-reduce buckets, which
            # saves copying them in and out of the buckets every step (the same averaged values).
            self.loss_module = DistributedDataParallel(
                self.loss_module, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                gradient_as_bucket_view=True)
        self.val_index = None
        if val_set is not None:
            val_gen = torch.Generator().manual_seed(tcfg.seed + 1)
            self.val_index = torch.randperm(len(val_set), generator=val_gen)[:tcfg.val_samples]
        self.history: dict[str, list] = {"train": [], "val": []}
        self.window = {"l1": 0.0, "kl": 0.0, "target_cm": 0.0, "place_cm": 0.0, "n": 0}  # losses since the last log
        self.step, self.train_time, self.wall_before = 0, 0.0, 0.0
        self.phase = "idle"  # "prepare" (weights untouched) and "update" inside train_step
        self.products = "fp32"  # the matrix products' precision in effect (train())
        self.started = time.perf_counter()

    def restore(self, saved: SavedState) -> None:
        st = saved.state
        try:
            self.model.load_state_dict(saved.model, strict=True)
            restore_optimizer(self.optimizer, saved)
            for group in self.optimizer.param_groups:  # the saved groups carry the flags they were saved with
                group.update(optimizer_flags())
            self.generator.set_state(saved.tensors["rng.generator"])
            torch.set_rng_state(saved.tensors["rng.torch"])
            self.sampler.order = saved.tensors["sampler.order"].clone()
            self.sampler.pos = int(st["sampler_pos"])
            self.step, self.history = int(st["step"]), st["history"]
            self.window = {**self.window, **st.get("loss_window", {})}
            self.train_time = float(st.get("train_time_s", 0.0))
            self.wall_before = float(st.get("wall_time_s", 0.0))
        except (KeyError, RuntimeError, ValueError, TypeError) as exc:
            raise TrainingError(f"training state {saved.path} does not fit this model "
                                f"({type(exc).__name__}: {exc}); delete it or train with "
                                "--no-resume") from None
        n = len(self.train_set)
        if len(self.sampler.order) != n or not 0 <= self.sampler.pos <= n:
            raise TrainingError(f"training state {saved.path} samples {len(self.sampler.order)} "
                                f"frames, the data has {len(self.train_set)}; use --no-resume")
        saved_world = st.get("world_size", 1)
        logger.info("resuming from %s at step %d%s", saved.path, self.step,
                    "" if saved_world == self.world.size
                    else f" (saved by {saved_world} process(es), now {self.world.size})")

    @property
    def wall_time(self) -> float:
        return self.wall_before + time.perf_counter() - self.started

    @property
    def samples_per_s(self) -> float:
        """Samples per second of training time, over all ranks (batch_size is the global batch)."""
        return self.step * self.tcfg.batch_size / self.train_time if self.train_time else 0.0

    def snapshot(self) -> _Snapshot:
        if self.streamed:  # the prefetch thread runs ahead: the state is that of the last batch taken
            s = self.stream_state or self.sampler.state()
            return _Snapshot(self.step, s.generator, torch.get_rng_state(), s.order, s.pos)
        return _Snapshot(self.step, self.generator.get_state(), torch.get_rng_state(),
                         self.sampler.order, self.sampler.pos)

    def save_state(self, snap: _Snapshot | None = None) -> None:
        snap = snap or self.snapshot()
        save_train_state(self.out, self.model, self.optimizer,
                         {"rng.generator": snap.generator, "rng.torch": snap.torch_rng,
                          "sampler.order": snap.order},
                         {"step": snap.step, "sampler_pos": snap.pos, "policy": self.cfg.to_dict(),
                          "train": self.tcfg.to_dict(), "normalization": self.normalizer.to_dict(),
                          "data_fingerprint": self.fingerprint, "history": self.history,
                          "loss_window": self.window, "train_time_s": self.train_time,
                          "wall_time_s": self.wall_time, "world_size": self.world.size})

    def make_batch(self, step: int, index: torch.Tensor) -> dict[str, torch.Tensor]:
        """Streamed runs: this rank's batch of step `step` (CPU tensors), its augmentation
        seeded by (seed, step, rank) alone."""
        generator = torch.Generator().manual_seed(step_seed(self.tcfg.seed, step, self.world.rank, "augment"))
        return self.train_set.batch(index, generator, augment=self.tcfg.augment,
                                    max_shift=self.tcfg.augment_shift, colour=self.tcfg.augment_colour)

    def open_stream(self) -> None:
        self.stream_state = self.sampler.state()
        self.stream = BatchStream(self.sampler, self.tcfg.batch_size, self.world.rank, self.world.size,
                                  self.make_batch, self.step, self.device, self.prefetch)

    def release_group(self) -> None:
        """Drop the DDP wrapper (it holds the process group) before the group is destroyed,
        so gloo's connections close inside the with-block, not at interpreter exit."""
        if self.loss_module is not self._plain_loss:
            self.loss_module = self._plain_loss
            gc.collect()

    def close_stream(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None

    def train_step(self) -> dict[str, float]:
        """One optimizer update; raises _NonFiniteError before touching the weights."""
        if self.streamed:
            return self.streamed_step()
        tcfg = self.tcfg
        t0 = time.perf_counter()
        self.phase = "prepare"
        batch = self.train_set.batch(self.sampler.next(tcfg.batch_size), self.generator,
                                     augment=tcfg.augment, max_shift=tcfg.augment_shift, colour=tcfg.augment_colour)
        lr = lr_at(self.step, tcfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss, parts = self.model.loss(batch, generator=self.generator)
        values = {k: float(v) for k, v in parts.items()}
        if not math.isfinite(float(loss.detach())):
            raise _NonFiniteError(self.step, values)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), tcfg.grad_clip if tcfg.grad_clip > 0 else math.inf)
        if not math.isfinite(float(norm)):
            raise _NonFiniteError(self.step, {**values, "grad_norm": float(norm)})
        self.phase = "update"
        self.optimizer.step()
        self.step += 1
        self.phase = "idle"
        self.train_time += time.perf_counter() - t0
        return {"loss": float(loss.detach()), "lr": lr, **values}

    def streamed_step(self) -> dict[str, float]:
        """train_step for several processes or a GPU: this rank's part of the global batch;
        the losses are averaged over the ranks before the non-finite check, so every rank
        stops at the same step, and DDP averages the gradients in backward()."""
        tcfg, world = self.tcfg, self.world
        t0 = time.perf_counter()
        self.phase = "prepare"
        item = self.stream.next()
        lr = lr_at(self.step, tcfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        torch.manual_seed(step_seed(tcfg.seed, self.step, world.rank, "dropout"))
        noise = torch.Generator(self.device).manual_seed(step_seed(tcfg.seed, self.step, world.rank, "noise"))
        with autocast(self.device, self.amp):
            loss, parts = self.loss_module(item.batch, noise)
        names = sorted(parts)
        averaged = mean_over_ranks(world, [loss.detach(), *(parts[k] for k in names)])
        values = dict(zip(names, averaged[1:], strict=True))
        if not math.isfinite(averaged[0]):
            raise _NonFiniteError(self.step, values)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), tcfg.grad_clip if tcfg.grad_clip > 0 else math.inf)
        if not math.isfinite(float(norm)):  # the same on every rank: the gradients are averaged
            raise _NonFiniteError(self.step, {**values, "grad_norm": float(norm)})
        self.phase = "update"
        self.optimizer.step()
        self.step += 1
        self.stream_state = item.after
        self.phase = "idle"
        if self.sync_every and self.step % self.sync_every == 0:
            check_in_sync(world, self.model, self.step)
            self.sync_checks += 1
        self.train_time += time.perf_counter() - t0
        return {"loss": averaged[0], "lr": lr, **values}

    def log(self, values: Mapping[str, float], force: bool) -> None:
        w = self.window
        w["l1"] += values["l1"]
        w["kl"] += values.get("kl", 0.0)
        w["target_cm"] += values.get("target_cm", 0.0)
        w["place_cm"] += values.get("place_cm", 0.0)
        w["n"] += 1
        if self.step % self.tcfg.log_every == 0 or force:
            point = {"step": self.step, "l1": w["l1"] / w["n"], "lr": values["lr"],
                     "kl": w["kl"] / w["n"] if self.cfg.use_cvae else None}
            if self.cfg.target_weight > 0:
                point["target_cm"] = w["target_cm"] / w["n"]
            if self.cfg.place_weight > 0:
                point["place_cm"] = w["place_cm"] / w["n"]
            self.history["train"].append(point)
            self.window = {"l1": 0.0, "kl": 0.0, "target_cm": 0.0, "place_cm": 0.0, "n": 0}

    def validate(self) -> float:
        result = evaluate(self.model, self.val_set, self.val_index, self.tcfg.batch_size,
                          self.device, self.amp)
        point = {"step": self.step, "l1": result["l1"]}
        if result["target_cm"] is not None:
            point["target_cm"] = result["target_cm"]
        if "place_cm" in result:
            point["place_cm"] = result["place_cm"]
        if self.ground_val_set is not None:
            index = torch.arange(min(len(self.ground_val_set), self.tcfg.val_samples))
            ground = evaluate(self.model, self.ground_val_set, index, self.tcfg.batch_size,
                              self.device, self.amp)
            point["grounding_cm"] = ground["target_cm"]
            if ground["patch_acc"] is not None:
                point["grounding_patch_acc"] = ground["patch_acc"]
        self.history["val"].append(point)
        return result["l1"]

    def run(self, end: int, progress: bool) -> None:
        """Train up to step `end`, checkpointing as configured and at `end`."""
        from tqdm import tqdm

        tcfg = self.tcfg
        last_val = self.history["val"][-1]["l1"] if self.history["val"] else None
        main = self.world.is_main
        bar = tqdm(total=tcfg.steps, initial=self.step, desc="training", unit="step",
                   file=sys.stderr, disable=not (progress and main), dynamic_ncols=True)
        snap = None
        if self.streamed:
            self.open_stream()
        try:
            while self.step < end:
                snap = self.snapshot()
                values = self.train_step()
                self.log(values, force=self.step == end)
                if main and self.val_set is not None and (self.step % tcfg.val_every == 0
                                                          or self.step == tcfg.steps):
                    last_val = self.validate()
                if main and (self.step % tcfg.checkpoint_every == 0 or self.step == end):
                    self.save_state()
                if main and self.step % tcfg.val_every == 0:
                    point = self.history["val"][-1] if self.history["val"] else {}
                    target, ground = point.get("target_cm"), point.get("grounding_cm")
                    acc, place = point.get("grounding_patch_acc"), point.get("place_cm")
                    logger.info("step %d/%d  train L1 %.4f  val L1 %s%s%s%s%s  lr %.2e  %.1f samples/s",
                                self.step, tcfg.steps, values["l1"],
                                "-" if last_val is None else f"{last_val:.4f}",
                                "" if target is None else f"  val target error {target:.2f} cm",
                                "" if ground is None else f"  grounding {ground:.2f} cm",
                                "" if acc is None else f" (right patch {acc:.0%})",
                                "" if place is None else f"  val place error {place:.2f} cm",
                                values["lr"], self.samples_per_s)
                bar.update(1)
                bar.set_postfix_str(
                    f"loss {values['loss']:.4f}"
                    + ("" if last_val is None else f" val {last_val:.4f}")
                    + f" {self.samples_per_s:.1f} samples/s", refresh=False)
        except KeyboardInterrupt:
            if not main:
                raise
            if self.phase == "update":  # inside optimizer.step(): weights may be half-updated
                logger.warning("interrupted during a weight update: the last saved training "
                               "state is kept")
                raise
            # Before the update the weights are those of the snapshot's step; between steps
            # everything is current.
            self.save_state(snap if self.phase == "prepare" else None)
            self.phase = "idle"
            logger.warning("interrupted: training state at step %s saved in %s",
                           saved_step(self.out / STATE_DIR), self.out / STATE_DIR)
            raise
        finally:
            self.close_stream()
            bar.close()

    def metrics(self, episodes: Sequence, data_info: Mapping[str, Any] | None) -> dict[str, Any]:
        h = self.history
        val_frames = len(self.val_set) if self.val_set is not None else 0
        return {
            "data": {"episodes": len(episodes), "frames": len(self.train_set) + val_frames,
                     "train_episodes": self.train_set.n_episodes - self.grounding_train,
                     "grounding_frames": self.grounding_train
                     + (len(self.ground_val_set) if self.ground_val_set else 0),
                     "grounding_val_frames": len(self.ground_val_set) if self.ground_val_set else 0,
                     "val_episodes": self.val_set.n_episodes if self.val_set else 0,
                     "train_frames": len(self.train_set), "val_frames": val_frames,
                     "val_samples": 0 if self.val_index is None else len(self.val_index),
                     "bags": [str(e.bag) for e in episodes if hasattr(e, "bag")],
                     "fingerprint": self.fingerprint, **dict(data_info or {})},
            "policy": self.cfg.to_dict(), "train": self.tcfg.to_dict(),
            "parameters": self.model.num_parameters(), "steps": self.step,
            "samples": self.step * self.tcfg.batch_size,
            "wall_time_s": round(self.wall_time, 3), "train_time_s": round(self.train_time, 3),
            "samples_per_s": round(self.samples_per_s, 2),
            "device": str(self.device), "precision": "bf16" if self.amp == torch.bfloat16 else "fp32",
            "matmul_precision": self.products, "optimizer": OPTIMIZER,
            "distributed": {"world_size": self.world.size, "backend": self.world.backend,
                            "global_batch": self.tcfg.batch_size,
                            "per_rank_batch": self.tcfg.batch_size // self.world.size,
                            "streamed": self.streamed, "prefetch": self.prefetch,
                            "sync_checks": self.sync_checks},
            "final": {"train_l1": h["train"][-1]["l1"] if h["train"] else None,
                      "train_kl": h["train"][-1].get("kl") if h["train"] else None,
                      "val_l1": h["val"][-1]["l1"] if h["val"] else None,
                      "val_target_cm": h["val"][-1].get("target_cm") if h["val"] else None,
                      "val_place_cm": h["val"][-1].get("place_cm") if h["val"] else None,
                      "val_grounding_cm": h["val"][-1].get("grounding_cm") if h["val"] else None,
                      "val_grounding_patch_acc": h["val"][-1].get("grounding_patch_acc") if h["val"] else None},
            "torch": torch.__version__,
        }


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AMX or AVX512-BF16; Linux flags)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


@contextlib.contextmanager
def matmul_precision(precision: str, device: torch.device) -> Iterator[str]:
    """TrainConfig.matmul_precision for the duration of the block (restored after) -> the
    precision in effect: "bf16" only on a CPU that has bf16 instructions."""
    if precision != "bf16" or device.type != "cpu":
        yield "fp32"
        return
    if not cpu_has_bf16():
        logger.warning("matmul_precision=bf16: this CPU has no bf16 instructions; using fp32")
        yield "fp32"
        return
    settings = torch.backends.mkldnn.matmul
    previous = settings.fp32_precision
    settings.fp32_precision = "bf16"
    try:
        yield "bf16"
    finally:
        settings.fp32_precision = previous


GROWABLE = ("vocab", "max_instruction_tokens")
"""Policy config fields a fine-tune may enlarge (_load_init): a vocabulary that extends the
checkpoint's, more instruction tokens. Nothing else changes the shape of what is learned."""
ADDABLE = ("place_weight", "condition_on_place")
"""Policy config fields that add a head to a checkpoint without one (_load_init): the place
head and its conditioning of the queries. The new layers start as a fresh model's."""
_ADDED_MODULES = ("patch_place_head.", "place_head.", "place_to_queries.")


def _load_init(directory: str, cfg: PolicyConfig, seed: int):
    """(model, normalizer) of the checkpoint to fine-tune from. Its config must be cfg, or
    differ only by growing (GROWABLE): then the model is cfg's, with every weight of the
    checkpoint and the embedding rows of its words; the new words' rows start as nn.Embedding
    starts them, N(0, 1), drawn from `seed` alone, so every data-parallel process has the
    same (the weights are loaded after DDP's start-up broadcast)."""
    try:
        model, normalizer, config = load_checkpoint(directory)
    except CheckpointError as exc:
        raise TrainingError(f"init_from: {exc}") from None
    diffs = config.differences(cfg)
    adds = set(diffs) & set(ADDABLE)
    grows = (set(diffs) <= set(GROWABLE) | set(ADDABLE)
             and cfg.vocab[: len(config.vocab)] == config.vocab
             and cfg.max_instruction_tokens >= config.max_instruction_tokens
             and (not adds or (float(config.place_weight) == 0.0 and not config.condition_on_place)))
    if diffs and not grows:
        raise TrainingError(f"init_from {directory} is a checkpoint of another policy config "
                            f"({describe_differences(diffs)}); a fine-tune may only extend the "
                            "vocabulary, add instruction tokens and add the place head")
    if diffs:
        # The new layers are drawn from `seed` alone, like the new words' rows.
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            grown = ACTPolicy(cfg)
        state = model.state_dict()
        old = state["word_embed.weight"]
        fresh = torch.randn(len(cfg.vocab) - len(config.vocab), cfg.width,
                            generator=torch.Generator().manual_seed(seed), dtype=old.dtype)
        embed = torch.cat([old, fresh])
        state["word_embed.weight"] = embed
        missing, unexpected = grown.load_state_dict(state, strict=False)
        if unexpected or any(not key.startswith(_ADDED_MODULES) for key in missing):
            raise TrainingError(f"init_from {directory}: weights do not fit (missing {missing}, "
                                f"unexpected {unexpected})")
        logger.info("init_from %s grows %s: %d -> %d words, %d -> %d instruction tokens%s", directory,
                    " and ".join(sorted(diffs)), len(config.vocab), len(cfg.vocab),
                    config.max_instruction_tokens, cfg.max_instruction_tokens,
                    f", {len(missing)} new tensors of the place head" if missing else "")
        model = grown
    return model, normalizer


def _check_out_dir(out: Path, policy_config: PolicyConfig) -> None:
    """When resuming, refuse to overwrite a finished checkpoint of another config."""
    if not (out / "config.json").is_file() or find_train_state(out) is not None:
        return
    hint = "use another --out, or --no-resume to overwrite it"
    try:
        existing = read_config(out)
    except CheckpointError as exc:
        raise TrainingError(f"{out} holds a damaged checkpoint ({exc}); {hint}") from None
    diffs = existing.differences(policy_config)
    if diffs:
        raise TrainingError(f"{out} holds a checkpoint of another policy config "
                            f"({describe_differences(diffs)}); {hint}")


def train(episodes: Sequence, policy_config: PolicyConfig, train_config: TrainConfig,
          out_dir: str | os.PathLike, *, resume: bool = True, progress: bool = True,
          data_info: Mapping[str, Any] | None = None, stop_after: int | None = None,
          grounding: Sequence = (), device: str = "auto", precision: str = "auto",
          prefetch: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
          sync_every: int | None = None, phrasings: Callable[[str], Sequence[str]] | None = None,
          function_words: Collection[str] = ()) -> dict[str, Any]:
    """Train on `episodes` (objects as policy.data describes) into the checkpoint out_dir.

    phrasings: instruction -> the sentences of its goal, which TrainConfig.paraphrase draws
    from (policy.data.ChunkDataset; arm_act.common.instructions.training_phrasings_of).
    function_words: the words TrainConfig.word_dropout may replace by <unk>
    (arm_act.common.instructions.FUNCTION_WORDS).

    grounding: frames without actions (has_actions=False, e.g. arm_act.data.grounding) that train
    only the target head; val_fraction of them (at least one) is held out and reported as
    the validation grounding error.

    resume: continue from out_dir/train_state when there is one (refused when the configs
    or the data differ); False starts over. stop_after: stop after this many steps of this
    call, keeping train_state but writing no final checkpoint (a time slice; the next call
    resumes). data_info: extra facts for metrics.json's "data" (e.g. skipped bags). Ctrl-C
    saves the state of the last finished step and re-raises KeyboardInterrupt.

    device: auto (CUDA when present), cpu, cuda or cuda:N (policy/device.py); under
    torchrun each process takes cuda:LOCAL_RANK. precision: auto (bf16 autocast on a GPU
    that supports it, float32 on CPU), fp32 or bf16. prefetch: batches prepared ahead on a
    thread (None: 2 on a GPU, 0 on CPU). timeout_s: how long a collective waits for the
    other ranks before the run stops with an error. sync_every: compare the ranks' weights
    every this many steps (None: at every checkpoint_every; 0: never).

    At the end: save_checkpoint (model.safetensors, config.json, normalization.json,
    metrics.json), loss_curves.png, by rank 0 alone. -> the metrics dict (on every rank;
    under torchrun its "distributed" part adds this rank's weights_sha256).
    Raises TrainingError for unusable inputs, a device that is not there, a failed or
    timed-out collective, and for a non-finite loss or gradient (training stops; the last
    good train_state is kept).
    """
    cfg, tcfg, out = policy_config, train_config, Path(out_dir)
    episodes = list(episodes)
    if not episodes:
        raise TrainingError("no episodes to train on")
    if stop_after is not None and stop_after < 1:
        raise ValueError(f"stop_after={stop_after} must be >= 1")
    try:
        rank, world_size, _ = world_from_env()
    except DistributedError as exc:
        raise TrainingError(str(exc)) from None
    if tcfg.batch_size % world_size:
        raise TrainingError(f"batch_size={tcfg.batch_size} (the global batch) is not divisible by "
                            f"the {world_size} processes")
    if tcfg.warmup_steps >= tcfg.steps:
        logger.warning("warmup_steps=%d >= steps=%d: the learning rate never reaches lr=%g",
                       tcfg.warmup_steps, tcfg.steps, tcfg.lr)
    train_ids, val_ids = split_episodes(len(episodes), tcfg.val_fraction, tcfg.seed)
    grounding = list(grounding)
    if grounding and cfg.target_weight <= 0:
        raise TrainingError("grounding frames train the target head: set target_weight > 0")
    ground_train, ground_val = split_episodes(len(grounding), tcfg.val_fraction, tcfg.seed) if grounding else ([], [])
    fingerprint = data_fingerprint(episodes + grounding)

    saved = None
    state_path = find_train_state(out)
    if resume:
        _check_out_dir(out, cfg)
        if state_path is not None:
            saved = load_train_state(state_path)
            saved.state["train"].setdefault("matmul_precision", "fp32")  # states saved before it existed
            check_resumable(saved, cfg, tcfg.to_dict(), fingerprint)
    elif state_path is not None and rank == 0:
        logger.info("not resuming: removing the training state in %s", state_path)
        remove_train_state(out)

    init = None
    if tcfg.init_from and saved is None:
        init = _load_init(tcfg.init_from, cfg, tcfg.seed)
    try:
        train_eps = [episodes[i] for i in train_ids]
        if saved:
            normalizer = Normalizer.from_dict(saved.state["normalization"])
        else:
            normalizer = init[1] if init else fit_normalizer(train_eps, cfg.cameras)
        hold = tcfg.hold_after_end
        if tcfg.paraphrase and phrasings is None:
            raise ValueError("paraphrase needs the phrasings of each goal (train(..., phrasings=...))")
        train_set = ChunkDataset(train_eps + [grounding[i] for i in ground_train], cfg, normalizer, hold,
                                 phrasings=phrasings if tcfg.paraphrase else None,
                                 word_dropout=tcfg.word_dropout, function_words=function_words)
        val_set = ChunkDataset([episodes[i] for i in val_ids], cfg, normalizer, hold) if val_ids else None
        ground_val_set = (ChunkDataset([grounding[i] for i in ground_val], cfg, normalizer)
                          if ground_val else None)
    except ValueError as exc:
        raise TrainingError(str(exc)) from None

    out.mkdir(parents=True, exist_ok=True)
    try:
        with process_group(device, timeout_s) as world:
            amp = amp_dtype(world.device, precision)
            if prefetch is None:
                prefetch = 2 if world.device.type == "cuda" else 0
            if sync_every is None:
                sync_every = tcfg.checkpoint_every if world.distributed else 0
            forked = [world.device.index] if world.device.type == "cuda" else []
            with torch.random.fork_rng(devices=forked), torch_threads(tcfg.threads), \
                    matmul_precision(tcfg.matmul_precision, world.device) as products:
                trainer = _Trainer(cfg, tcfg, out, normalizer, train_set, val_set, fingerprint,
                                   ground_val_set, world, amp, prefetch, sync_every)
                trainer.products = products
                try:
                    return _run(trainer, saved, init, stop_after, episodes, data_info, progress)
                finally:
                    trainer.release_group()
    except (DeviceError, DistributedError) as exc:
        raise TrainingError(str(exc)) from None


def _run(trainer: _Trainer, saved: SavedState | None, init, stop_after: int | None,
         episodes: Sequence, data_info: Mapping[str, Any] | None, progress: bool) -> dict[str, Any]:
    """train()'s loop and outputs, inside its device, process-group and RNG contexts."""
    tcfg, out, normalizer = trainer.tcfg, trainer.out, trainer.normalizer
    if saved is not None:
        trainer.restore(saved)
    elif init is not None:
        trainer.model.load_state_dict(init[0].state_dict(), strict=True)
        trainer.model.train()
        logger.info("initialised from %s", tcfg.init_from)
    end = tcfg.steps if stop_after is None else min(tcfg.steps, trainer.step + stop_after)
    try:
        trainer.run(end, progress)
    except _NonFiniteError as exc:
        kept = find_train_state(out)
        raise TrainingError(
            f"non-finite {'gradient' if 'grad_norm' in exc.values else 'loss'} at step "
            f"{exc.step} ({exc.values}); training stopped. "
            + (f"The last good training state (step {saved_step(kept)}) is kept in {kept}"
               if kept else "No training state was saved yet")
            + "; try a lower lr or check the data") from None
    metrics = trainer.metrics(episodes, data_info)
    if trainer.world.distributed:
        metrics["distributed"]["weights_sha256"] = weights_digest(trainer.model)
    if trainer.step < tcfg.steps:
        logger.info("stopped at step %d of %d; the next run resumes from %s",
                    trainer.step, tcfg.steps, out / STATE_DIR)
        return metrics
    if trainer.world.is_main:
        save_checkpoint(out, trainer.model, normalizer, metrics)
        plot_losses(trainer.history, out / CURVES_FILE,
                    f"{out.name}: {trainer.step} steps, {len(trainer.train_set)} training frames")
    # The ranks leave the group together, once rank 0 has saved: a rank that left and exited
    # while another still held the group's connections sometimes aborted in gloo's teardown.
    barrier(trainer.world, "finishing the training")
    return metrics
