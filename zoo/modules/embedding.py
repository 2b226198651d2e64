"""Input embedding: token ids (B, T) -> vectors (B, T, C), plus positions, token types, scale and norm."""

from __future__ import annotations

import math

import torch
from torch import nn

from zoo.modules.norm import make_norm
from zoo.modules.positional import POSITIONALS


class Embeddings(nn.Module):
    """`tok[ids] * scale + pos + type` (scale: sqrt(d_model) with embed_scale, times embed_multiplier), then
    optional norm and dropout. The token table may be shared
    (encoder-decoder source/target, and the tied output head)."""

    def __init__(self, cfg, tokens: nn.Embedding) -> None:
        super().__init__()
        self.tokens = tokens
        self.positional = POSITIONALS.get(cfg.positional.name)(cfg)
        self.types = nn.Embedding(cfg.type_vocab_size, cfg.d_model) if cfg.type_vocab_size else None
        self.scale = (math.sqrt(cfg.d_model) if cfg.embed_scale else 1.0) * cfg.embed_multiplier
        self.norm = make_norm(cfg) if cfg.embed_norm else nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.tokens(input_ids)  # (B, T) -> (B, T, C)
        if self.scale != 1.0:
            x = x * self.scale
        x = self.positional.add(x, position_ids)
        if self.types is not None:
            x = x + self.types(token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids))
        return self.drop(self.norm(x))
