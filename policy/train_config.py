"""Training settings (the model's shape is PolicyConfig's) and the learning-rate schedule."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MATMUL_PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class TrainConfig:
    """How to train (the model's shape is PolicyConfig's)."""

    # About an hour for the default PolicyConfig on this machine (measured ~29 samples/s at
    # batch 32 on one thread; width 128 with 3 encoder layers: ~86 samples/s).
    steps: int = 3000
    batch_size: int = 32
    # ACT uses 1e-5 with a pretrained ResNet backbone; the patch embedding here is trained
    # from scratch, which wants the usual small-transformer rate with warm-up.
    lr: float = 3e-4
    weight_decay: float = 1e-2
    warmup_steps: int = 200
    min_lr_ratio: float = 0.1  # the cosine ends at lr * min_lr_ratio
    seed: int = 0
    val_fraction: float = 0.1  # of the episodes
    val_samples: int = 256  # a fixed subset of the validation frames, evaluated every val_every
    val_every: int = 250
    checkpoint_every: int = 500
    log_every: int = 10  # steps per point of the training-loss history
    augment: bool = True
    augment_shift: int = 2  # pixels of random shift when augmenting (policy/data.py MAX_SHIFT)
    augment_colour: float = 0.0  # per-channel colour gain jitter when augmenting, +- this fraction
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    # torch intra-op threads. 1 by default: with the other core of a 2-core machine busy,
    # 2 OpenMP threads made elementwise ops ~15x slower and training 2.2x slower (13 vs
    # 29 samples/s, default config, batch 32); use 2 on an otherwise idle machine.
    threads: int = 1
    num_workers: int = 0  # batches are gathered in memory by indexing; only 0 is supported
    # Grounding frames for the target head (policy.model target_weight): rendered layouts that
    # have no actions, only "where is the named block". `arm-act train` renders them (seeds
    # from grounding_seed on, never used by collect or eval); a fraction shows the arm in a
    # pose borrowed from another demonstration, so the pose cannot give the target away.
    # The poses come from the expert's own episodes, not from takeover bags, so a fine-tune
    # on stage 1's demonstrations plus new rounds reuses stage 1's cached layouts.
    grounding_layouts: int = 0
    grounding_seed: int = 1_000_000
    grounding_borrowed_poses: float = 0.5
    # Of the layouts in a borrowed pose, the fraction whose named block is moved to 2-7 cm
    # beside the hand (arm_act.data.grounding, "beside the hand"): after a missed grasp the
    # hand hovers beside the block, and a target head that learned "the block is under the
    # hand" from the demonstrations keeps the retries there.
    grounding_near_hand: float = 0.0
    # The task of the grounding layouts (box | stack | relation | mix, arm_act.sim.instructions):
    # their instructions name the block to move in that family's words.
    grounding_task: str = "box"
    # Teach every training phrasing of each episode's goal (arm_act.sim.instructions): each
    # sample of an augmented batch reads one of them at random (policy.data.ChunkDataset).
    # Needs a vocabulary and instruction-token budget that hold them (config/train_families.json).
    paraphrase: bool = False
    # Word dropout: in an augmented batch each function word of an instruction (one that names
    # no colour, family, place or relation: the, block, put, of, ...) becomes <unk> with this
    # probability, so the network reads the goal from the words that carry it, as it must for
    # a sentence whose other words it never saw (held-out phrasings map those to <unk>).
    word_dropout: float = 0.0
    # Fine-tuning: start from this checkpoint's weights and normalization statistics (its
    # policy config must equal this run's) instead of a fresh initialisation; "" = none.
    init_from: str = ""
    # Supervise chunk steps past an episode's end as "hold the last command" instead of
    # masking them (policy.data.ChunkDataset): episodes end when the task succeeds, so
    # otherwise nothing teaches the chunk's tail near the release.
    hold_after_end: bool = False
    # Matrix products on the CPU: "fp32", or "bf16": float32 tensors everywhere, but oneDNN
    # rounds a product's inputs to bfloat16 and accumulates in float32 (AMX / AVX512-BF16;
    # torch.backends.mkldnn.matmul.fp32_precision). 3x faster products on a CPU with AMX and
    # the same loss curve within seed noise (docs/training.md, "Training speed"); ignored with
    # a warning on a CPU without bf16 instructions, and on a GPU (which has autocast).
    matmul_precision: str = "fp32"

    def __post_init__(self) -> None:
        if not isinstance(self.init_from, str):
            raise ValueError(f"init_from={self.init_from!r} must be a checkpoint path or ''")
        for name in ("steps", "batch_size", "val_samples", "val_every", "checkpoint_every",
                     "log_every", "threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        for name in ("warmup_steps", "seed", "grounding_layouts", "grounding_seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}={value!r} must be an integer >= 0")
        for name, low, high in (("lr", 0.0, math.inf), ("weight_decay", 0.0, 1.0),
                                ("min_lr_ratio", 0.0, 1.0), ("val_fraction", 0.0, 1.0),
                                ("grounding_borrowed_poses", 0.0, 1.0), ("grounding_near_hand", 0.0, 1.0),
                                ("grad_clip", 0.0, math.inf)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or not low <= value <= high:
                raise ValueError(f"{name}={value!r} must be a number in [{low}, {high}]")
        if (isinstance(self.word_dropout, bool) or not isinstance(self.word_dropout, (int, float))
                or not 0.0 <= self.word_dropout < 1.0):
            raise ValueError(f"word_dropout={self.word_dropout!r} must be a number in [0, 1)")
        if self.lr <= 0:
            raise ValueError(f"lr={self.lr!r} must be > 0")
        if self.val_fraction >= 1.0:
            raise ValueError(f"val_fraction={self.val_fraction!r} must be < 1")
        if not isinstance(self.augment_shift, int) or not 0 <= self.augment_shift <= 16:
            raise ValueError(f"augment_shift={self.augment_shift!r} must be an int in [0, 16]")
        if (isinstance(self.augment_colour, bool) or not isinstance(self.augment_colour, (int, float))
                or not 0.0 <= self.augment_colour < 1.0):
            raise ValueError(f"augment_colour={self.augment_colour!r} must be a number in [0, 1)")
        if self.grounding_task not in ("box", "stack", "relation", "mix"):
            raise ValueError(f"grounding_task={self.grounding_task!r} must be one of box, stack, relation, mix")
        for name in ("augment", "hold_after_end", "paraphrase"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be a bool")
        if self.matmul_precision not in MATMUL_PRECISIONS:
            raise ValueError(f"matmul_precision={self.matmul_precision!r} must be one of {MATMUL_PRECISIONS}")
        if self.num_workers != 0:
            raise ValueError(f"num_workers={self.num_workers!r}: only 0 is supported (batches "
                             "are gathered from in-memory arrays; workers would only copy)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Build from a (possibly partial) dict; unknown keys are an error."""
        if not isinstance(data, Mapping):
            raise ValueError(f"train config must be a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown train config keys {unknown}")
        return cls(**data)


def lr_at(step: int, config: TrainConfig) -> float:
    """Learning rate of the update from `step` to step + 1: linear warm-up over
    warmup_steps, then a cosine from lr down to lr * min_lr_ratio at `steps`."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    span = max(1, config.steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return config.lr * (config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine)
