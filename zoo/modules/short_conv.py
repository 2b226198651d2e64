"""LFM2's gated short convolution: the `short_conv` entry of the token-mixer registry MIXERS.

x (B, T, C) -> in_proj -> [b | c | h], each (B, T, C); the input gate b times h; a causal depthwise
convolution of L taps (`conv_L_cache`: this token and L - 1 before, per channel) over b*h; the output gate c
times that; out_proj (C -> C). No heads, no softmax, no positions: the convolution carries order. Keys:
zoo.modules.mixer_settings.ShortConvSettings (transformers' Lfm2 names: `conv_L_cache`, `conv_bias`).

Padding (attention_mask 0): b*h is zeroed at pads before the convolution, so a pad never enters a real
token's window and a left-padded row gives what the row alone gives (the row alone is padded by zeros).

Decoding: the layer's cache entry (zoo.modules.cache.LayerCache.state) is the last L - 1 convolution inputs
(B, L - 1, C), the same size at any length; a step continues from it. It follows beams (reorder); for
speculative decoding the window is also cut after each of the last n tokens of a forward
(LayerCache.states_wanted) so that `crop` can put back the one after the kept tokens; a static cache holds it
in a buffer filled in place (the compiled step)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from zoo.modules.attention_free import check_attention_free_spine
from zoo.modules.mask import AttentionMask, real_tokens
from zoo.modules.mixers import MIXERS
from zoo.modules.position_terms import PositionTerms


@MIXERS.register("short_conv")
class ShortConv(nn.Module):
    """Gated causal depthwise convolution (LFM2's conv layers); see the module docstring."""

    tap: Callable[[str, torch.Tensor], None] | None = None  # set only while tracing (nothing is tapped)
    cross = False
    causal_only = True  # a left-to-right window: no bidirectional (encoder) stack can use it
    packs_documents = False  # the window would read the end of the previous packed document
    tensor_parallel_refusal = ("its in_proj rows [b | c | h] and per-channel convolution are not in "
                               "attention's split of q/k/v by heads")

    def __init__(self, cfg) -> None:
        super().__init__()
        s, width = cfg.mixer, cfg.d_model
        self.in_proj = nn.Linear(width, 3 * width, bias=s.conv_bias)  # rows [b | c | h]
        self.conv = nn.Conv1d(width, width, s.conv_L_cache, groups=width, bias=s.conv_bias)  # depthwise
        self.out_proj = nn.Linear(width, width, bias=s.conv_bias)

    @classmethod
    def cross_attention(cls, cfg) -> nn.Module:
        raise ValueError("model.mixer=short_conv is a causal convolution over one sequence and has no "
                         "cross-attention form; arch=encoder_decoder needs model.mixer=attention.")

    @classmethod
    def check_config(cls, cfg) -> None:
        """What short_conv's keys say with the rest of the config (ValueError naming the key)."""
        check_attention_free_spine(cfg, "short_conv",
                                   "has no heads (one convolution per channel of model.d_model)",
                                   "its causal convolution")

    def forward(
        self,
        x: torch.Tensor,
        mask: AttentionMask,
        *,
        memory: torch.Tensor | None = None,
        positions: PositionTerms | None = None,
        cache=None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, None]:
        """x (B, T, C) -> (out (B, T, C), None: there are no attention weights)."""
        b, t, _ = x.shape
        gate_in, gate_out, h = self.in_proj(x).chunk(3, dim=-1)  # each (B, T, C)
        gated = gate_in * h
        stepping = cache is not None and cache.stepping  # a static step's token is real (mask: the buffer's)
        real = None if stepping else real_tokens(mask, b, t)  # (B, T) or None: every token real
        if real is not None:  # pads read as zeros, as the row alone is padded by the convolution
            gated = gated * real[..., None].to(gated.dtype)
        taps = self.conv.kernel_size[0]
        held = cache.state if cache is not None else {}
        window = held.get("conv", gated.new_zeros(b, taps - 1, gated.shape[-1]))  # the L - 1 inputs before
        full = torch.cat([window, gated], dim=1)  # (B, L - 1 + T, C)
        mixed = self.conv(full.transpose(1, 2)).transpose(1, 2)  # causal: (B, T, C)
        if cache is not None:  # fixed size at any length: the last L - 1 inputs, after each wanted token
            ends = range(t - cache.states_wanted(t) + 1, t + 1)
            cache.record(t, [{"conv": full[:, end : end + taps - 1].clone()} for end in ends])
        return self.out_proj(gate_out * mixed), None
