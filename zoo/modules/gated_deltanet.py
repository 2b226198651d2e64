"""Gated DeltaNet (Qwen3-Next, Qwen3.5): the `gated_deltanet` entry of the token-mixer registry MIXERS.

x (B, T, C) -> qkv (B, T, 2 Hk Dk + Hv Dv) through a causal depthwise convolution of K taps and SiLU, split
into q, k (B, Hk, T, Dk), L2-normalised, and v (B, Hv, T, Dv); each key head serves Hv / Hk value heads.
Per value head: beta = sigmoid(b(x)) (how far the state moves to the new value; times 2 with
`linear_allow_neg_eigval`, OLMo-hybrid) and the log decay
g = -exp(A_log) softplus(a(x) + dt_bias) (< 0). The gated delta rule (zoo.modules.delta_rule) runs chunked
over a sequence and one step at a time when asked (`recurrent=True`); its output per head goes through an
RMSNorm gated by silu(z(x)) (B, T, Hv, Dv), then o (Hv Dv -> C). Keys: zoo.modules.mixer_settings.
GatedDeltaNetSettings. No positions: the recurrence carries order, so RoPE and score biases do not apply.

Padding (attention_mask 0): a pad's convolution input is zero, so left pads give q = k = v = 0 and leave the
state at zero (its decay of zero is zero): a left-padded row gives what the row alone gives.

Decoding: the layer's cache entries (zoo.modules.cache.LayerCache.state) are the last K - 1 convolution
inputs (B, K - 1, W) and the state (B, Hv, Dk, Dv), the same size at any length; a step continues from
them. They follow beams (reorder). Speculative decoding rolls them back: its caches ask for the entries
after each of the last n tokens of a forward (LayerCache.states_wanted), which this layer computes by running
those n tokens in the recurrent form (the rest chunked) and cutting the window at each; `crop` puts back the
ones after the kept tokens. A static cache holds them in buffers filled in place (the compiled step)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from zoo.modules import delta_rule
from zoo.modules.attention_free import check_attention_free_spine
from zoo.modules.mask import AttentionMask, real_tokens
from zoo.modules.mixers import MIXERS
from zoo.modules.position_terms import PositionTerms
from zoo.modules.residual import WIRINGS


class GatedRMSNorm(nn.Module):
    """RMSNorm over each head's Dv features times silu(gate) (transformers' Qwen3NextRMSNormGated)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype) * self.weight
        return (x * F.silu(gate.float())).to(dtype)


@MIXERS.register("gated_deltanet")
class GatedDeltaNet(nn.Module):
    """Linear attention with a delta-rule state per value head; see the module docstring."""

    tap: Callable[[str, torch.Tensor], None] | None = None  # set only while tracing (nothing is tapped)
    cross = False
    causal_only = True  # a left-to-right recurrence: no bidirectional (encoder) stack can use it
    packs_documents = False  # one state per row: packed documents (document_ids) would leak into each other
    tensor_parallel_refusal = ("its q/k/v convolution, key heads shared by value heads and per-head decay "
                               "are not in attention's split of q/k/v by heads")

    def __init__(self, cfg) -> None:
        super().__init__()
        s = cfg.mixer
        self.key_heads, self.value_heads = s.linear_num_key_heads, s.linear_num_value_heads
        self.key_dim, self.value_dim = s.linear_key_head_dim, s.linear_value_head_dim
        self.chunk_size = s.chunk_size
        self.beta_scale = 2.0 if s.linear_allow_neg_eigval else 1.0  # beta in [0, 2] (OLMo-hybrid) or [0, 1]
        width = 2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim
        self.qkv = nn.Linear(cfg.d_model, width, bias=False)  # rows [q (Hk Dk) | k (Hk Dk) | v (Hv Dv)]
        self.conv = nn.Conv1d(width, width, s.linear_conv_kernel_dim, groups=width, bias=False)  # depthwise
        self.z = nn.Linear(cfg.d_model, self.value_heads * self.value_dim, bias=False)  # the output gate
        self.b = nn.Linear(cfg.d_model, self.value_heads, bias=False)  # beta before its sigmoid
        self.a = nn.Linear(cfg.d_model, self.value_heads, bias=False)  # the decay's input
        self.A_log = nn.Parameter(torch.empty(self.value_heads).uniform_(1, 16).log())  # decay rate per head
        self.dt_bias = nn.Parameter(torch.ones(self.value_heads))
        eps = cfg.norm_eps if s.output_norm_eps is None else s.output_norm_eps  # OLMo-hybrid: its own 1e-5
        self.norm = GatedRMSNorm(self.value_dim, eps)
        self.o = nn.Linear(self.value_heads * self.value_dim, cfg.d_model, bias=False)

    @classmethod
    def cross_attention(cls, cfg) -> nn.Module:
        raise ValueError("model.mixer=gated_deltanet is a causal recurrence over one sequence and has no "
                         "cross-attention form; arch=encoder_decoder needs model.mixer=attention.")

    @classmethod
    def check_config(cls, cfg) -> None:
        """What gated_deltanet's keys say with the rest of the config (ValueError naming the key)."""
        s = cfg.mixer
        if s.linear_num_value_heads % s.linear_num_key_heads:
            raise ValueError(
                f"model.mixer.linear_num_value_heads={s.linear_num_value_heads} is not divisible by "
                f"model.mixer.linear_num_key_heads={s.linear_num_key_heads}: each key head serves a whole "
                "number of value heads (Qwen3.5: 16 key, 32 value).")
        if s.norm_placement is not None and s.norm_placement not in WIRINGS.names():
            key = "model.linear_mixer" if cfg.linear_mixer is not None else "model.mixer"
            raise ValueError(f"{key}.norm_placement={s.norm_placement!r} is not a residual wiring; choose "
                             f"one of {' | '.join(WIRINGS.names())} (or null: model.norm_placement).")
        check_attention_free_spine(cfg, "gated_deltanet",
                                   "sizes its heads with model.mixer.linear_num_key_heads, "
                                   "linear_num_value_heads, linear_key_head_dim and linear_value_head_dim",
                                   "its recurrence")

    def forward(
        self,
        x: torch.Tensor,
        mask: AttentionMask,
        *,
        memory: torch.Tensor | None = None,
        positions: PositionTerms | None = None,
        cache=None,
        need_weights: bool = False,
        recurrent: bool = False,
    ) -> tuple[torch.Tensor, None]:
        """x (B, T, C) -> (out (B, T, C), None: there are no attention weights). `recurrent=True` runs the
        state one token at a time (the decoding form) instead of in chunks; both give the same numbers."""
        b, t, _ = x.shape
        stepping = cache is not None and cache.stepping  # a static step's token is real (mask: the buffer's)
        real = None if stepping else real_tokens(mask, b, t)  # (B, T) or None: every token real
        qkv = self.qkv(x)  # (B, T, W)
        if real is not None:  # pads read as zeros, as the row alone is padded by the convolution
            qkv = qkv * real[..., None].to(qkv.dtype)
        held = cache.state if cache is not None else {}
        kernel = self.conv.kernel_size[0]
        window = held.get("conv", qkv.new_zeros(b, kernel - 1, qkv.shape[-1]))  # the K - 1 inputs before
        full = torch.cat([window, qkv], dim=1)  # (B, K - 1 + T, W)
        qkv = F.silu(self.conv(full.transpose(1, 2))).transpose(1, 2)  # causal: (B, T, W)
        q, k, v = qkv.split([self.key_heads * self.key_dim] * 2 + [self.value_heads * self.value_dim], -1)
        group = self.value_heads // self.key_heads
        q, k = (_normalised(t_.view(b, t, self.key_heads, self.key_dim), group) for t_ in (q, k))
        v = v.view(b, t, self.value_heads, self.value_dim).transpose(1, 2)  # (B, Hv, T, Dv)
        beta = self.b(x).sigmoid().transpose(1, 2) * self.beta_scale  # (B, Hv, T)
        wide = torch.promote_types(x.dtype, torch.float32)  # the decay in float32 at least (fp16 A_log: -inf)
        g = (-self.A_log.to(wide).exp() * F.softplus(self.a(x).to(wide) + self.dt_bias)).transpose(1, 2)
        state = held.get("recurrent")  # (B, Hv, Dk, Dv) or None: zeros
        wanted = cache.states_wanted(t) if cache is not None else 1  # states after each of the last `wanted`
        if recurrent or t == 1:  # one decoding step: the recurrent form, nothing to solve
            out, states = delta_rule.recurrent_states(q, k, v, g, beta, state)
        else:  # chunked up to the last `wanted` - 1 tokens, whose states are kept one by one
            head = t - wanted + 1
            out, state = delta_rule.chunked(*(x_[:, :, :head] for x_ in (q, k, v, g, beta)), state,
                                            chunk_size=self.chunk_size)
            states = [state]
            if wanted > 1:
                tail, more = delta_rule.recurrent_states(*(x_[:, :, head:] for x_ in (q, k, v, g, beta)),
                                                         state)
                out, states = torch.cat([out, tail], dim=2), states + more
        if cache is not None:  # fixed size whatever the length: the last K - 1 inputs and the state
            ends = range(t - wanted + 1, t + 1)  # the tokens after which the entries are wanted
            cache.record(t, [{"conv": full[:, end : end + kernel - 1].clone(), "recurrent": held_state}
                             for end, held_state in zip(ends, states[-wanted:], strict=True)])
        out = out.to(x.dtype).transpose(1, 2)  # (B, T, Hv, Dv)
        z = self.z(x).view(b, t, self.value_heads, self.value_dim)
        out = self.norm(out, z).reshape(b, t, self.value_heads * self.value_dim)
        return self.o(out), None


def _normalised(t: torch.Tensor, group: int) -> torch.Tensor:
    """q or k (B, T, Hk, Dk) -> L2-normalised in float32 or wider (eps 1e-6, as flash-linear-attention),
    repeated to the value heads: (B, Hv, T, Dk)."""
    t = t.to(torch.promote_types(t.dtype, torch.float32))
    t = t * torch.rsqrt(t.pow(2).sum(-1, keepdim=True) + 1e-6)
    return t.repeat_interleave(group, dim=2).transpose(1, 2)

