"""One Transformer layer and the stack of them, shared by encoder, decoder and encoder-decoder.

A layer is self-attention, then (decoder of an encoder-decoder) cross-attention, then the FFN. The residual
wiring chosen by `norm_placement` (zoo.modules.residual) wraps them with norms, dropout and the residual
add."""

from __future__ import annotations

import functools
import math

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from zoo.modules import gated_deltanet as _gated_deltanet  # noqa: F401  (registers mixer=gated_deltanet)
from zoo.modules import mla as _mla  # noqa: F401  (registers mixer=mla)
from zoo.modules import short_conv as _short_conv  # noqa: F401  (registers mixer=short_conv)
from zoo.modules.attention import MIXERS
from zoo.modules.cache import KVCache
from zoo.modules.feedforward import FFNS
from zoo.modules.mask import AttentionMask
from zoo.modules.moe import layer as _moe  # noqa: F401  (registers ffn=moe)
from zoo.modules.norm import make_norm
from zoo.modules.positional import PositionTerms
from zoo.modules.residual import WIRINGS, uses_final_norm


class Block(nn.Module):
    """Self-attention [+ cross-attention] [+ FFN], each with residual, dropout and norm as configured."""

    def __init__(self, cfg, *, cross: bool = False, index: int = 0) -> None:
        """`index`: the layer's place in its stack (the FFN kind may differ by layer: MoE every k-th)."""
        super().__init__()
        self.wiring, self.residual = WIRINGS.get(cfg.layer_norm_placement(index))(), cfg.residual
        self.self_attn = MIXERS.get(cfg.layer_mixer(index).name)(cfg.for_layer(index))
        # the decoder's attention over the encoder output is model.mixer's (a recurrence has no cross form)
        self.cross_attn = MIXERS.get(cfg.mixer.name).cross_attention(cfg) if cross else None
        self.ffn = FFNS.get(cfg.ffn.name).build(cfg, index)
        for name in self.sublayer_names():
            self.wiring.add_norms(self, name, cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.branch_scale = 1.0  # each sub-layer's output times this before the residual add (depth_scale)

    def sublayer_names(self) -> list[str]:
        """The sub-layers this block runs, in order: self [, cross] [, ffn]."""
        return (["self"] + (["cross"] if self.cross_attn is not None else [])
                + (["ffn"] if self.ffn is not None else []))

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
        weights: dict[str, torch.Tensor | None] = {"self": None, "cross": None}

        def self_attn(h: torch.Tensor) -> torch.Tensor:
            h, weights["self"] = self.self_attn(h, mask, positions=positions, cache=cache,
                                                need_weights=need_weights)
            return h

        def cross_attn(h: torch.Tensor) -> torch.Tensor:
            h, weights["cross"] = self.cross_attn(h, memory_mask, memory=memory, cache=cache,
                                                  need_weights=need_weights)
            return h

        run = {"self": self_attn, "cross": cross_attn, "ffn": self.ffn}
        x = self.wiring.run(self, x, [(name, run[name]) for name in self.sublayer_names()])
        return x, weights["self"], weights["cross"]


class Stack(nn.Module):
    """n_layers Blocks plus the final norm (by default when the wiring leaves the residual stream
    unnormalised)."""

    def __init__(self, cfg, n_layers: int, *, cross: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(cfg, cross=cross, index=i) for i in range(n_layers))
        for layer in self.layers:
            layer.branch_scale = branch_scale(cfg, n_layers)
        if not cfg.first_attn_norm and n_layers:  # ModernBERT: layer 0's attention reads the embedding norm
            self.layers[0].wiring.without_input_norm(self.layers[0], "self")
        self.local = [cfg.layer_is_local(i) for i in range(n_layers)]  # sliding-window self-attention
        self.rotates = [cfg.layer_rotates(i) for i in range(n_layers)]  # False: a NoPE layer (SmolLM3)
        self.final_norm = make_norm(cfg) if uses_final_norm(cfg) else nn.Identity()
        self.checkpoint_layers = False  # recompute each layer in backward (zoo.modules.checkpointing)

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
        hidden_states: list[torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, list, list]:
        """x (B, T, C) -> (final-normed output, self-attention weights, cross-attention weights) per layer.
        `hidden_states`, when a list, receives n_layers + 1 tensors as transformers' output_hidden_states:
        each layer's input (the first is the embedding output), then the stack's output after the final
        norm."""
        self_weights, cross_weights = [], []
        recompute = self.checkpoint_layers and self.training and torch.is_grad_enabled() and cache is None
        for i, layer in enumerate(self.layers):
            # recompute: activations rebuilt in backward, the RNG replayed (dropout draws the same masks)
            step = functools.partial(checkpoint, layer, use_reentrant=False) if recompute else layer
            if hidden_states is not None:
                hidden_states.append(x)
            x, sw, cw = step(
                x, mask.for_layer(self.local[i]), None if positions is None or not self.rotates[i]
                else positions.for_layer(self.local[i]), memory=memory, memory_mask=memory_mask,
                cache=cache.layers[i] if cache is not None else None, need_weights=need_weights,
            )
            self_weights.append(sw)
            cross_weights.append(cw)
        x = self.final_norm(x)
        if hidden_states is not None:
            hidden_states.append(x)
        return x, self_weights, cross_weights


def branch_scale(cfg, n_layers: int) -> float:
    """What each residual branch of an `n_layers`-deep stack is multiplied by: model.depth_scale /
    sqrt(n_layers) (MiniCPM's scale_depth), 1 without one."""
    return 1.0 if cfg.depth_scale is None else cfg.depth_scale / math.sqrt(max(1, n_layers))
