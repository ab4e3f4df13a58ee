"""The policy's one config dataclass: validated on construction, round-trips through JSON."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from arm_act.policy.vocab import default_vocab, validate_vocab

# Fields added after checkpoints were first written, with the value an older checkpoint's
# model has (the feature off).
ADDED_FIELDS: dict[str, Any] = {"condition_on_target": False, "place_weight": 0.0, "condition_on_place": False,
                                "stem_channels": ()}


@dataclass(frozen=True)
class PolicyConfig:
    """Shape and training hyper-parameters of the ACT-style policy.

    Defaults are sized for batch-1 inference well inside one 10 Hz camera period on two CPU
    cores and for training on two cores in about an hour (see policy/budget.py and
    `arm-act budget`): 96x96 images, 16x16 patches (36 tokens per camera), width 256.
    """

    image_size: int = 96  # square images, pixels per side
    patch_size: int = 16  # patch side P; image_size must be a multiple of it
    # Output channels of the convolutional stem's layers (3x3, stride 2, GELU), one entry a
    # layer, before the patches are cut; () cuts the raw pixels (ViT's linear patches). Each
    # layer halves the image, so patch_size must be a multiple of 2^len. The token grid stays
    # image_size / patch_size per side (docs/architecture.md, "The policy network").
    stem_channels: tuple[int, ...] = ()
    cameras: tuple[str, ...] = ("front", "wrist")
    width: int = 256  # model width D
    heads: int = 8
    encoder_layers: int = 4
    decoder_layers: int = 1
    chunk_size: int = 50  # K future control steps (1 s at 50 Hz), one action query each
    action_dim: int = 8  # 7 arm joint targets + gripper opening
    state_dim: int = 9  # 7 arm joints + 2 finger joints
    mlp_ratio: int = 4  # MLP hidden width = mlp_ratio * D (4D, as in Vaswani et al. 2017)
    dropout: float = 0.1
    # The ACT paper's ablation (Zhao et al. 2023, Sec. V-D) found the CVAE matters for noisy
    # human demonstrations but makes little difference on scripted ones, which is what this
    # project trains on; so it is off by default and costs nothing at inference.
    use_cvae: bool = False
    latent_dim: int = 32
    cvae_layers: int = 2
    kl_weight: float = 10.0  # ACT's default
    pre_ln: bool = True
    decoder_rope: bool = False  # rotary positions in the action queries' self-attention
    max_instruction_tokens: int = 8
    # Weight of the auxiliary target head's losses (0 = no such head): every encoder patch
    # token scores "the named block is in this patch" (cross-entropy against the patch that
    # holds the block's centre), and the block's position is read from the patch tokens
    # pooled by those scores. Labels come from the bags' objects topic and from grounding
    # layouts; never an input. The action loss alone did not teach the policy which block
    # to pick (docs/training.md, "Finding the named block").
    target_weight: float = 0.0
    # Condition every action query on the target head's estimate of the named block (a small
    # MLP of the estimate, added to the queries), learned end to end with the chunk loss: the
    # decoder then gets where to go as three numbers instead of having to find the block again
    # in the patch tokens. Needs the target head (target_weight > 0).
    condition_on_target: bool = False
    # Weight of the auxiliary place head's losses (0 = no such head): as the target head, but
    # for where the moved block ends: every patch scores "the place is in this patch" and the
    # place is read from the patch tokens pooled by those scores. Labels: the moved block's
    # position at the end of each demonstration, and its pixel in each camera at each frame.
    # Without it the chunk decoder carried stacked and related blocks to one mean place
    # (docs/tasks.md, "A place head").
    place_weight: float = 0.0
    # Condition every action query on the place head's estimate, as condition_on_target does
    # with the target's. Needs the place head (place_weight > 0).
    condition_on_place: bool = False
    vocab: tuple[str, ...] = field(default_factory=default_vocab)

    def __post_init__(self) -> None:
        # Lists from JSON become tuples, so the config stays hashable and comparable.
        object.__setattr__(self, "cameras", tuple(self.cameras))
        object.__setattr__(self, "vocab", tuple(self.vocab))
        if not isinstance(self.stem_channels, (list, tuple)):
            raise ValueError(f"stem_channels={self.stem_channels!r} must be a list of channel counts")
        object.__setattr__(self, "stem_channels", tuple(self.stem_channels))
        for value in self.stem_channels:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"stem_channels={list(self.stem_channels)!r}: each must be an integer >= 1")
        positive = ("image_size", "patch_size", "width", "heads", "encoder_layers",
                    "decoder_layers", "chunk_size", "action_dim", "state_dim", "mlp_ratio",
                    "latent_dim", "cvae_layers", "max_instruction_tokens")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        for name in ("use_cvae", "pre_ln", "decoder_rope", "condition_on_target", "condition_on_place"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be a bool")
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size={self.image_size} must be a multiple of "
                             f"patch_size={self.patch_size}")
        if self.patch_size % (1 << len(self.stem_channels)):
            raise ValueError(f"patch_size={self.patch_size} must be a multiple of 2^{len(self.stem_channels)}: "
                             f"each of the {len(self.stem_channels)} stem layers halves the image")
        if self.width % self.heads:
            raise ValueError(f"width={self.width} must be divisible by heads={self.heads}")
        if self.width % 4:
            # The 2D sinusoidal encoding gives D/2 dimensions to rows and D/2 to columns,
            # each as sin/cos pairs.
            raise ValueError(f"width={self.width} must be a multiple of 4")
        if self.decoder_rope and (self.width // self.heads) % 2:
            raise ValueError(f"decoder_rope needs an even head width, got "
                             f"width/heads={self.width}/{self.heads}")
        if self.condition_on_target and not float(self.target_weight) > 0.0:
            raise ValueError("condition_on_target needs the target head (target_weight > 0)")
        if self.condition_on_place and not float(self.place_weight) > 0.0:
            raise ValueError("condition_on_place needs the place head (place_weight > 0)")
        if not self.cameras:
            raise ValueError("cameras=() must name at least one camera")
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"cameras={self.cameras!r} has duplicates")
        for cam in self.cameras:
            if not isinstance(cam, str) or not cam:
                raise ValueError(f"camera name {cam!r} must be a non-empty string")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ValueError(f"dropout={self.dropout!r} must be in [0, 1)")
        for name in ("kl_weight", "target_weight", "place_weight"):
            if not float(getattr(self, name)) >= 0.0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be >= 0")
        validate_vocab(self.vocab)

    # Derived sizes -----------------------------------------------------------------------
    @property
    def grid(self) -> int:
        """Patches per image side (image_size / patch_size)."""
        return self.image_size // self.patch_size

    @property
    def patches_per_camera(self) -> int:
        return self.grid * self.grid

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def encoder_tokens(self) -> int:
        """N: [latent?] + state + instruction + all cameras' patches."""
        return (int(self.use_cvae) + 1 + self.max_instruction_tokens
                + len(self.cameras) * self.patches_per_camera)

    # JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["cameras"] = list(self.cameras)
        out["vocab"] = list(self.vocab)
        out["stem_channels"] = list(self.stem_channels)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, partial: bool = False) -> PolicyConfig:
        """Build from a dict. Unknown keys are an error; so are missing ones unless partial
        (a checkpoint's config must be complete, or a changed default would silently change
        the model it describes)."""
        if not isinstance(data, dict):
            raise ValueError(f"policy config must be a JSON object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown policy config keys {unknown}")
        # Checkpoints written before a field existed lack it: it takes the value that
        # describes the model they hold.
        data = {**{k: v for k, v in ADDED_FIELDS.items() if k not in data}, **data}
        missing = sorted(names - set(data))
        if missing and not partial:
            raise ValueError(f"policy config is missing keys {missing}")
        return cls(**data)

    def differences(self, other: PolicyConfig) -> dict[str, tuple[Any, Any]]:
        """{field: (self's value, other's value)} for every field that differs."""
        return {f.name: (getattr(self, f.name), getattr(other, f.name))
                for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(other, f.name)}
