"""The ACT-style policy: an encoder over observation tokens, K learned action queries that
cross-attend to it, and a linear head to a chunk of K future actions (Zhao et al. 2023).

Encoder tokens, in order (N in all):
    [latent (CVAE only)] [state] [instruction x L] [camera 0 patches] [camera 1 patches] ...
with each camera's patches in row-major grid order (see TokenLayout).
All state and action values are in normalised units (policy/normalizer.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from arm_act.policy.attention import RotaryEmbedding, key_padding_mask
from arm_act.policy.blocks import Decoder, Encoder
from arm_act.policy.config import PolicyConfig
from arm_act.policy.tokens import PatchEmbedding, sinusoidal_1d
from arm_act.policy.vocab import PAD_ID, InstructionTokenizer


@dataclass(frozen=True)
class TokenLayout:
    """Where each kind of token sits among the encoder's N tokens."""

    n_tokens: int
    latent: int | None  # index of the CVAE latent token, None without the CVAE
    state: int
    instruction: slice
    cameras: tuple[str, ...]
    camera_starts: tuple[int, ...]
    grid: int  # patches per image side

    @classmethod
    def from_config(cls, config: PolicyConfig) -> TokenLayout:
        i = 0
        latent = None
        if config.use_cvae:
            latent, i = 0, 1
        state, i = i, i + 1
        instruction = slice(i, i + config.max_instruction_tokens)
        i = instruction.stop
        starts = tuple(i + c * config.patches_per_camera for c in range(len(config.cameras)))
        return cls(config.encoder_tokens, latent, state, instruction, config.cameras, starts,
                   config.grid)

    def camera_slice(self, camera: str) -> slice:
        start = self.camera_starts[self._camera(camera)]
        return slice(start, start + self.grid * self.grid)

    def patch_index(self, camera: str, row: int, col: int) -> int:
        """Token index of the patch at (row, col) of a camera's grid."""
        if not (0 <= row < self.grid and 0 <= col < self.grid):
            raise ValueError(f"(row, col)=({row}, {col}) outside the {self.grid}x{self.grid} grid")
        return self.camera_starts[self._camera(camera)] + row * self.grid + col

    def patch_grids(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """Attention weights (..., N) -> {camera: (..., grid, grid)}, e.g. to draw where
        the action queries look in each image."""
        return {cam: weights[..., self.camera_slice(cam)].unflatten(-1, (self.grid, self.grid))
                for cam in self.cameras}

    def _camera(self, camera: str) -> int:
        if camera not in self.cameras:
            raise ValueError(f"unknown camera {camera!r}; cameras are {list(self.cameras)}")
        return self.cameras.index(camera)


# The named block's position (m, world frame) is predicted as (p - TARGET_CENTRE) / TARGET_SCALE,
# about unit range over the task's block region and the box.
TARGET_CENTRE = (0.45, 0.0, 0.05)
TARGET_SCALE = 0.1


@dataclass
class PolicyOutput:
    actions: torch.Tensor  # (B, K, A) normalised
    mu: torch.Tensor | None  # (B, latent) CVAE posterior mean, when actions were given
    logvar: torch.Tensor | None  # (B, latent)
    cross_attention: torch.Tensor | None  # (B, heads, K, N) last decoder layer, if asked
    target: torch.Tensor | None = None  # (B, 3) named block's position (m), with a target head
    target_logits: torch.Tensor | None = None  # (B, C, h*w) "the named block is in this patch"
    # (B, heads, L, N): the instruction tokens' self-attention in the encoder, averaged over
    # its layers, if asked (where the words look in the images: policy.runtime)
    instruction_attention: torch.Tensor | None = None
    place: torch.Tensor | None = None  # (B, 3) where the moved block ends (m), with a place head
    place_logits: torch.Tensor | None = None  # (B, C, h*w) "the place is in this patch"


class CVAEEncoder(nn.Module):
    """ACT's training-time encoder q(z | state, action chunk): [CLS, state, actions] through
    a small transformer; the CLS output gives the latent's mean and log-variance."""

    def __init__(self, config: PolicyConfig):
        super().__init__()
        d = config.width
        self.cls = nn.Parameter(torch.randn(d) * 0.02)
        self.state_proj = nn.Linear(config.state_dim, d)
        self.action_proj = nn.Linear(config.action_dim, d)
        self.register_buffer("pos", sinusoidal_1d(torch.arange(config.chunk_size + 2), d),
                             persistent=False)
        self.encoder = Encoder(config.cvae_layers, d, config.heads, config.mlp_ratio,
                               config.dropout, config.pre_ln)
        self.to_latent = nn.Linear(d, 2 * config.latent_dim)

    def forward(self, state: torch.Tensor, actions: torch.Tensor,
                action_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """state (B, S), actions (B, K, A), action_mask (B, K) bool -> mu, logvar (B, latent)."""
        b = state.shape[0]
        x = torch.cat([self.cls.expand(b, 1, -1), self.state_proj(state)[:, None],
                       self.action_proj(actions)], dim=1) + self.pos  # (B, K+2, D)
        mask = None
        if action_mask is not None:
            head = torch.ones(b, 2, dtype=torch.bool, device=state.device)
            mask = key_padding_mask(torch.cat([head, action_mask], dim=1))  # (B, 1, 1, K+2)
        h, _ = self.encoder(x, mask)  # (B, K+2, D)
        mu, logvar = self.to_latent(h[:, 0]).chunk(2, dim=-1)  # (B, latent) each
        return mu, logvar


class ACTPolicy(nn.Module):
    """Images, joint state and instruction -> a chunk of K normalised actions."""

    def __init__(self, config: PolicyConfig):
        super().__init__()
        self.config = config
        self.layout = TokenLayout.from_config(config)
        d = config.width
        self.patch_embed = PatchEmbedding(len(config.cameras), config.image_size,
                                          config.patch_size, d, config.stem_channels)
        self.state_proj = nn.Linear(config.state_dim, d)
        self.word_embed = nn.Embedding(len(config.vocab), d, padding_idx=PAD_ID)
        self.register_buffer(
            "instruction_pos",
            sinusoidal_1d(torch.arange(config.max_instruction_tokens), d), persistent=False)
        self.cvae = CVAEEncoder(config) if config.use_cvae else None
        self.latent_proj = nn.Linear(config.latent_dim, d) if config.use_cvae else None
        self.encoder = Encoder(config.encoder_layers, d, config.heads, config.mlp_ratio,
                               config.dropout, config.pre_ln)
        # One learned query per future control step (ACT's query_embed), N(0, 1) like the
        # nn.Embedding ACT uses, so the queries start out distinct.
        self.action_queries = nn.Parameter(torch.randn(config.chunk_size, d))
        rope = RotaryEmbedding(config.head_dim, config.chunk_size) if config.decoder_rope else None
        self.decoder = Decoder(config.decoder_layers, d, config.heads, config.mlp_ratio,
                               config.dropout, config.pre_ln, rope)
        self.head = nn.Linear(d, config.action_dim)
        # Auxiliary: where is the named block? Each patch token says whether it holds the
        # named block (a local question: the patch attends to the instruction's few tokens
        # and compares the colour word with its own pixels), and the position is read from
        # the patch tokens pooled by those scores. Finding the block by a search over all
        # patches from the instruction's side alone did not learn (docs/training.md,
        # "Finding the named block": 13 cm after 500 steps; per-patch scores 7.7 cm after 300).
        self.patch_target_head = nn.Linear(d, 1) if config.target_weight > 0 else None
        self.target_head = nn.Linear(d, 3) if config.target_weight > 0 else None
        self.register_buffer("target_centre", torch.tensor(TARGET_CENTRE), persistent=False)
        # The estimate (in the head's normalised units) -> an offset added to every action
        # query. The last layer starts at zero, so training starts from the unconditioned model.
        self.target_to_queries = None
        if config.condition_on_target:
            self.target_to_queries = nn.Sequential(nn.Linear(3, d), nn.GELU(), nn.Linear(d, d))
            nn.init.zeros_(self.target_to_queries[2].weight)
            nn.init.zeros_(self.target_to_queries[2].bias)
        # Auxiliary: where does the moved block go? The same construction as the target head
        # (patch scores, pooled patches, a position), with its own conditioning of the queries.
        self.patch_place_head = nn.Linear(d, 1) if config.place_weight > 0 else None
        self.place_head = nn.Linear(d, 3) if config.place_weight > 0 else None
        self.place_to_queries = None
        if config.condition_on_place:
            self.place_to_queries = nn.Sequential(nn.Linear(3, d), nn.GELU(), nn.Linear(d, d))
            nn.init.zeros_(self.place_to_queries[2].weight)
            nn.init.zeros_(self.place_to_queries[2].bias)

    def tokenizer(self) -> InstructionTokenizer:
        return InstructionTokenizer(self.config.vocab, self.config.max_instruction_tokens)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, images: torch.Tensor, state: torch.Tensor, instruction_ids: torch.Tensor,
                instruction_mask: torch.Tensor, actions: torch.Tensor | None = None,
                action_mask: torch.Tensor | None = None, need_weights: bool = False,
                generator: torch.Generator | None = None) -> PolicyOutput:
        """images (B, C, 3, H, W) float in [0, 1]; state (B, S) normalised; instruction_ids
        (B, L) long; instruction_mask (B, L) bool, True = real word; actions (B, K, A)
        normalised and action_mask (B, K) bool, used only by the CVAE encoder.

        With the CVAE, the latent is sampled from q(z | state, actions) in training mode
        (noise from `generator`), its mean in eval mode, and z = 0 (the prior's mean, ACT's
        inference) when no actions are given. need_weights returns the last decoder layer's
        cross-attention weights (B, heads, K, N) and the instruction tokens' encoder
        self-attention averaged over the layers (B, heads, L, N). -> PolicyOutput.
        """
        cfg = self.config
        self._check_inputs(images, state, instruction_ids, instruction_mask, actions, action_mask)
        b, d = images.shape[0], cfg.width
        tokens = []
        mu = logvar = None
        if self.cvae is not None:
            if actions is not None:
                mu, logvar = self.cvae(state, actions, action_mask)
                z = mu
                if self.training:
                    eps = torch.randn(mu.shape, generator=generator, device=mu.device,
                                      dtype=mu.dtype)
                    z = mu + (0.5 * logvar).exp() * eps  # reparameterisation trick
                tokens.append(self.latent_proj(z)[:, None])  # (B, 1, D)
            else:
                # z = 0, so the projection reduces to its bias: no matmul at inference.
                tokens.append(self.latent_proj.bias.expand(b, 1, d))  # (B, 1, D)
        tokens.append(self.state_proj(state)[:, None])  # (B, 1, D)
        tokens.append(self.word_embed(instruction_ids) + self.instruction_pos)  # (B, L, D)
        tokens.append(self.patch_embed(images))  # (B, C*h*w, D)
        x = torch.cat(tokens, dim=1)  # (B, N, D)

        mask = None
        if not bool(instruction_mask.all()):  # skip the mask (and its cost) when nothing pads
            valid = torch.ones(b, self.layout.n_tokens, dtype=torch.bool, device=x.device)
            valid[:, self.layout.instruction] = instruction_mask
            mask = key_padding_mask(valid)  # (B, 1, 1, N)
        memory, words_attention = self.encoder(x, mask, self.layout.instruction if need_weights else None)
        queries = self.action_queries.expand(b, -1, -1)  # (B, K, D)
        patches = memory[:, self.layout.camera_starts[0]:]  # (B, C*h*w, D)
        target = logits = place = place_logits = None
        if self.target_head is not None:
            target, logits, estimate = self._pooled_position(patches, self.patch_target_head, self.target_head)
            if self.target_to_queries is not None:
                queries = queries + self.target_to_queries(estimate)[:, None]  # (B, K, D)
        if self.place_head is not None:
            place, place_logits, estimate = self._pooled_position(patches, self.patch_place_head, self.place_head)
            if self.place_to_queries is not None:
                queries = queries + self.place_to_queries(estimate)[:, None]  # (B, K, D)
        h, weights = self.decoder(queries, memory, mask, need_weights=need_weights)  # (B, K, D)
        return PolicyOutput(self.head(h), mu, logvar, weights, target, logits,  # actions (B, K, A)
                            words_attention, place, place_logits)

    def _pooled_position(self, patches: torch.Tensor, scorer: nn.Linear, head: nn.Linear
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """patches (B, C*h*w, D) -> (position (B, 3) m, patch logits (B, C, h*w), the position
        in the head's normalised units (B, 3)): each patch scored, the patches pooled by the
        scores' softmax, the pooled token read as a position."""
        scores = scorer(patches).squeeze(-1)  # (B, C*h*w)
        pooled = (scores.softmax(dim=-1)[..., None] * patches).sum(dim=1)  # (B, D)
        estimate = head(pooled)  # (B, 3) normalised units
        logits = scores.unflatten(-1, (len(self.config.cameras), self.config.patches_per_camera))
        return estimate * TARGET_SCALE + self.target_centre, logits, estimate

    def loss(self, batch: Mapping[str, torch.Tensor], generator: torch.Generator | None = None
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """batch: images, state, instruction_ids, instruction_mask, actions (B, K, A) and
        optionally action_mask (B, K) bool (False = padding past the episode's end).
        -> (loss, {"l1": ..., "kl": ... (CVAE only)}), the parts detached."""
        actions = batch["actions"]
        action_mask = batch.get("action_mask")
        out = self(batch["images"], batch["state"], batch["instruction_ids"],
                   batch["instruction_mask"],
                   actions=actions if self.cvae is not None else None,
                   action_mask=action_mask, generator=generator)
        l1 = chunk_l1(out.actions, actions, action_mask)
        parts = {"l1": l1.detach()}
        loss = l1
        if out.mu is not None:
            kl = kl_divergence(out.mu, out.logvar)
            parts["kl"] = kl.detach()
            loss = loss + self.config.kl_weight * kl
        # The position heads: (label key, patch label key, estimate, patch logits, part names, weight).
        heads = (("target", "target_patch", out.target, out.target_logits, "target_cm", "patch_ce",
                  self.config.target_weight),
                 ("place", "place_patch", out.place, out.place_logits, "place_cm", "place_ce",
                  self.config.place_weight))
        for key, patch_key, position, logits, cm_name, ce_name, weight in heads:
            if position is not None and key in batch:
                err = target_error(position, batch[key])
                parts[cm_name] = (err * 100.0).detach()
                loss = loss + weight * err / TARGET_SCALE
            if logits is not None and patch_key in batch:
                ce = patch_cross_entropy(logits, batch[patch_key])
                parts[ce_name] = ce.detach()
                loss = loss + weight * ce
        return loss, parts

    def _check_inputs(self, images, state, ids, ids_mask, actions, action_mask) -> None:
        cfg = self.config
        expect = (len(cfg.cameras), 3, cfg.image_size, cfg.image_size)
        if images.ndim != 5 or tuple(images.shape[1:]) != expect:
            raise ValueError(f"images must be (B, {', '.join(map(str, expect))}), "
                             f"got {tuple(images.shape)}")
        if not images.is_floating_point():
            raise ValueError(f"images must be float in [0, 1] (see policy.tokens."
                             f"images_to_tensor), got {images.dtype}")
        b = images.shape[0]
        if tuple(state.shape) != (b, cfg.state_dim):
            raise ValueError(f"state must be ({b}, {cfg.state_dim}), got {tuple(state.shape)}")
        lshape = (b, cfg.max_instruction_tokens)
        if tuple(ids.shape) != lshape or tuple(ids_mask.shape) != lshape:
            raise ValueError(f"instruction_ids and instruction_mask must be {lshape}, got "
                             f"{tuple(ids.shape)} and {tuple(ids_mask.shape)}")
        if ids_mask.dtype != torch.bool:
            raise ValueError(f"instruction_mask must be bool, got {ids_mask.dtype}")
        kshape = (b, cfg.chunk_size, cfg.action_dim)
        if actions is not None and tuple(actions.shape) != kshape:
            raise ValueError(f"actions must be {kshape}, got {tuple(actions.shape)}")
        if action_mask is not None and (tuple(action_mask.shape) != kshape[:2]
                                        or action_mask.dtype != torch.bool):
            raise ValueError(f"action_mask must be a {kshape[:2]} bool tensor, got "
                             f"{action_mask.dtype} {tuple(action_mask.shape)}")


def chunk_l1(pred: torch.Tensor, target: torch.Tensor,
             valid: torch.Tensor | None = None) -> torch.Tensor:
    """Mean |pred - target| over valid steps. pred, target (B, K, A); valid (B, K) bool.

    Divides by the number of valid entries (ACT averages over padded ones too, which
    weights short chunks less); 0 when nothing is valid.
    """
    err = (pred - target).abs()  # (B, K, A)
    if valid is None:
        return err.mean()
    w = valid.to(err.dtype)[..., None]  # (B, K, 1)
    return (err * w).sum() / (w.sum() * err.shape[-1]).clamp_min(1.0)


def target_error(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean absolute error (m, per coordinate) of the predicted block position over the rows
    whose target is known (NaN rows are skipped); 0 when none is. pred, target (B, 3)."""
    known = torch.isfinite(target).all(dim=-1)  # (B,)
    if not bool(known.any()):
        return pred.sum() * 0.0  # keeps the graph (and every grad defined)
    return (pred[known] - target[known]).abs().mean()


def patch_cross_entropy(logits: torch.Tensor, patch: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of "which patch of this camera holds the named block" over the
    (sample, camera) pairs that know it. logits (B, C, h*w); patch (B, C) long, -1 = unknown."""
    known = patch >= 0  # (B, C)
    if not bool(known.any()):
        return logits.sum() * 0.0
    return torch.nn.functional.cross_entropy(logits[known], patch[known])


def kl_divergence(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """KL(N(mu, exp(logvar)) || N(0, I)) summed over latent dims, mean over the batch (ACT)."""
    return (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp())).sum(dim=-1).mean()
