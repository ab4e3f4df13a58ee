"""The reference point for `arm-act bench`: the same ACT shape built from torch's stock
nn.TransformerEncoder / nn.TransformerDecoder, the way one would write it without the
hand-written attention of policy/ (what LeRobot-style code gets out of the box).

Same width D, heads, encoder and decoder depth, MLP width, token count N (state +
instruction + patches), K action queries and key-padding mask as the PolicyConfig; a linear
patch embedding equal to policy.tokens.PatchEmbedding's; Pre-LN (norm_first=True),
batch_first=True, GELU, dropout off. Weights are random: only the time is compared.
"""
from __future__ import annotations

import torch
from torch import nn

from arm_act.policy.config import PolicyConfig
from arm_act.policy.tokens import patchify


class BaselineACT(nn.Module):
    def __init__(self, config: PolicyConfig):
        super().__init__()
        self.config = config
        d = config.width
        mlp = config.mlp_ratio * d
        self.patch_size = config.patch_size
        self.patch_proj = nn.Linear(3 * config.patch_size ** 2, d)
        self.state_proj = nn.Linear(config.state_dim, d)
        self.word_embed = nn.Embedding(len(config.vocab), d)
        # The CVAE's latent token (z = 0 at inference) stands as a constant token, so N matches.
        self.latent = nn.Parameter(torch.zeros(int(config.use_cvae), d))
        self.pos = nn.Parameter(torch.randn(config.encoder_tokens, d) * 0.02)
        encoder_layer = nn.TransformerEncoderLayer(d, config.heads, mlp, dropout=0.0,
                                                   activation="gelu", batch_first=True,
                                                   norm_first=True)
        # enable_nested_tensor=False: nested tensors are slower at batch 1 and warn with
        # norm_first; the fused encoder-layer fast path still applies in eval mode.
        self.encoder = nn.TransformerEncoder(encoder_layer, config.encoder_layers,
                                             norm=nn.LayerNorm(d), enable_nested_tensor=False)
        decoder_layer = nn.TransformerDecoderLayer(d, config.heads, mlp, dropout=0.0,
                                                   activation="gelu", batch_first=True,
                                                   norm_first=True)
        self.decoder = nn.TransformerDecoder(decoder_layer, config.decoder_layers,
                                             norm=nn.LayerNorm(d))
        self.action_queries = nn.Parameter(torch.randn(config.chunk_size, d))
        self.head = nn.Linear(d, config.action_dim)

    def forward(self, images: torch.Tensor, state: torch.Tensor, instruction_ids: torch.Tensor,
                instruction_mask: torch.Tensor) -> torch.Tensor:
        """images (B, C, 3, H, W); state (B, S); instruction_ids, instruction_mask (B, L)
        -> actions (B, K, A)."""
        b = images.shape[0]
        patches = self.patch_proj(patchify(images * 2.0 - 1.0, self.patch_size))  # (B, C, h*w, D)
        lead = self.latent.shape[0] + 1  # [latent] + state before the instruction
        x = torch.cat([self.latent.expand(b, -1, -1), self.state_proj(state)[:, None],
                       self.word_embed(instruction_ids), patches.flatten(1, 2)],
                      dim=1) + self.pos  # (B, N, D)
        # torch's convention is the opposite of policy/'s: True = padding, ignore this key.
        padding = torch.zeros(b, x.shape[1], dtype=torch.bool, device=x.device)
        padding[:, lead:lead + instruction_mask.shape[1]] = ~instruction_mask  # (B, N)
        memory = self.encoder(x, src_key_padding_mask=padding)  # (B, N, D)
        queries = self.action_queries.expand(b, -1, -1)  # (B, K, D)
        h = self.decoder(queries, memory, memory_key_padding_mask=padding)  # (B, K, D)
        return self.head(h)  # (B, K, A)
