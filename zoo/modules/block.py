"""One Transformer layer and the stack of them, shared by encoder, decoder and encoder-decoder.

A layer is self-attention, then (decoder of an encoder-decoder) cross-attention, then the FFN. Each
sub-layer is wrapped by the norm placement: pre-LN `x + f(norm(x))` or post-LN `norm(x + f(x))`."""

from __future__ import annotations

import torch
from torch import nn

from zoo.modules.attention import Attention
from zoo.modules.cache import KVCache
from zoo.modules.feedforward import FeedForward
from zoo.modules.mask import AttentionMask
from zoo.modules.norm import make_norm
from zoo.modules.positional import PositionTerms


class Block(nn.Module):
    """Self-attention [+ cross-attention] [+ FFN], each with residual, dropout and norm as configured."""

    def __init__(self, cfg, *, cross: bool = False) -> None:
        super().__init__()
        self.pre_norm, self.residual = cfg.norm_placement == "pre", cfg.residual
        self.self_attn = Attention(cfg)
        self.norm_self = make_norm(cfg)
        self.cross_attn = Attention(cfg, cross=True) if cross else None
        self.norm_cross = make_norm(cfg) if cross else None
        self.ffn = FeedForward(cfg) if cfg.ffn == "mlp" else None
        self.norm_ffn = make_norm(cfg) if self.ffn is not None else None
        self.drop = nn.Dropout(cfg.dropout)

    def _enter(self, x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
        return norm(x) if self.pre_norm else x

    def _leave(self, x: torch.Tensor, h: torch.Tensor, norm: nn.Module) -> torch.Tensor:
        h = self.drop(h)
        out = x + h if self.residual else h
        return out if self.pre_norm else norm(out)

    def forward(
        self,
        x: torch.Tensor,
        mask: AttentionMask,
        positions: PositionTerms | None = None,
        *,
        memory: torch.Tensor | None = None,
        memory_mask: AttentionMask | None = None,
        cache=None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """x (B, T, C) -> (x, self-attention weights, cross-attention weights)."""
        h, self_w = self.self_attn(
            self._enter(x, self.norm_self), mask, positions=positions, cache=cache, need_weights=need_weights
        )
        x = self._leave(x, h, self.norm_self)
        cross_w = None
        if self.cross_attn is not None:
            h, cross_w = self.cross_attn(
                self._enter(x, self.norm_cross), memory_mask, memory=memory, cache=cache, need_weights=need_weights
            )
            x = self._leave(x, h, self.norm_cross)
        if self.ffn is not None:
            x = self._leave(x, self.ffn(self._enter(x, self.norm_ffn)), self.norm_ffn)
        return x, self_w, cross_w


class Stack(nn.Module):
    """n_layers Blocks plus the final norm that pre-LN needs (post-LN's last sub-layer already ends in one)."""

    def __init__(self, cfg, n_layers: int, *, cross: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(cfg, cross=cross) for _ in range(n_layers))
        self.final_norm = make_norm(cfg) if cfg.use_final_norm else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        mask: AttentionMask,
        positions: PositionTerms | None = None,
        *,
        memory: torch.Tensor | None = None,
        memory_mask: AttentionMask | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, list, list]:
        self_weights, cross_weights = [], []
        for i, layer in enumerate(self.layers):
            x, sw, cw = layer(
                x, mask, positions, memory=memory, memory_mask=memory_mask,
                cache=cache.layers[i] if cache is not None else None, need_weights=need_weights,
            )
            self_weights.append(sw)
            cross_weights.append(cw)
        return self.final_norm(x), self_weights, cross_weights
