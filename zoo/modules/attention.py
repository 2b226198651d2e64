"""Multi-head attention (MHA / GQA / MQA) for self- and cross-attention.

Shapes: x (B, T, C) -> q (B, H, T, D), k/v (B, KV, S, D), usually with C = H * D (`model.head_dim` may set D
apart). Scores q.k^T are scaled by 1/sqrt(D) so their variance stays ~1 whatever the head size (softmax would
saturate otherwise; `model.mixer.scale` overrides it). Optional: a q/k norm before RoPE, per head (Qwen3) or
over the whole projection (OLMo 2), a tanh soft cap on the scores (Gemma 2), and a learned sink logit per
head in the softmax's denominator (gpt-oss, `model.mixer.sinks`: zoo.modules.sinks), and an output gate
(Qwen3-Next, `model.mixer.output_gate`: the heads' output times sigmoid(gate(x)) before o). Its keys are
zoo.modules.mixer_settings.AttentionSettings; it is the `attention` entry of the token-mixer registry
MIXERS. The fast path is `scaled_dot_product_attention`; the explicit path (need_weights, a soft cap, or
while traced) also returns the softmax weights (B, H, T, S)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from zoo.modules.cache import LayerCache
from zoo.modules.mask import AttentionMask
from zoo.modules.mixers import MIXERS  # re-exported: the registry's long-standing home
from zoo.modules.norm import make_norm
from zoo.modules.positional import PositionTerms
from zoo.modules.sinks import sdpa_with_sinks, softmax_with_sinks

__all__ = ["MIXERS", "Attention"]


@MIXERS.register("attention")
class Attention(nn.Module):
    """Self-attention uses one fused [q | k | v] projection; cross-attention projects q from the decoder
    stream and [k | v] from the encoder output (memory)."""

    tap: Callable[[str, torch.Tensor], None] | None = None  # set only while tracing

    def __init__(self, cfg, *, cross: bool = False) -> None:
        super().__init__()
        self.cross = cross
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_size
        q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        if cross:
            self.q = nn.Linear(cfg.d_model, q_dim, bias=cfg.use_qkv_bias)
            self.kv = nn.Linear(cfg.d_model, 2 * kv_dim, bias=cfg.use_qkv_bias)
        else:
            self.qkv = nn.Linear(cfg.d_model, q_dim + 2 * kv_dim, bias=cfg.use_qkv_bias)
        self.o = nn.Linear(q_dim, cfg.d_model, bias=cfg.bias)  # W_O: mixes the concatenated heads
        settings = cfg.mixer
        self.qk_norm = settings.qk_norm_scope if settings.qk_norm else None  # None | "head" | "all"
        if self.qk_norm == "head":  # over each head's D features, shared by the heads
            self.q_norm, self.k_norm = make_norm(cfg, self.head_dim), make_norm(cfg, self.head_dim)
        elif self.qk_norm == "all":  # over the whole projection: H * D (q), KV * D (k) features
            self.q_norm, self.k_norm = make_norm(cfg, q_dim), make_norm(cfg, kv_dim)
        self.scale = self.head_dim**-0.5 if settings.scale is None else settings.scale
        self.softcap = settings.softcap
        self.dropout = cfg.attention_dropout
        # gpt-oss: a learned logit per head in each softmax's denominator (zoo.modules.sinks)
        self.sinks = nn.Parameter(torch.zeros(self.n_heads)) if settings.sinks and not cross else None
        # Qwen3-Next / Qwen3.5: each head's output times sigmoid of its own gate projection of x
        self.gate = nn.Linear(cfg.d_model, q_dim, bias=cfg.use_qkv_bias) \
            if settings.output_gate and not cross else None

    def attention_widths(self) -> tuple[int, int]:
        """(q.k, weights.v) features summed over the heads: what one query's two products cost per key."""
        return self.n_heads * self.head_dim, self.n_heads * self.head_dim

    @classmethod
    def cross_attention(cls, cfg) -> Attention:
        """The decoder's attention over the encoder output: this class, projecting k/v from the memory."""
        return cls(cfg, cross=True)

    def _heads(self, t: torch.Tensor, n: int) -> torch.Tensor:
        b, s, _ = t.shape
        return t.view(b, s, n, self.head_dim).transpose(1, 2)  # (B, T, n*D) -> (B, n, T, D)

    def _normed_heads(self, t: torch.Tensor, n: int, norm: str) -> torch.Tensor:
        """q or k (B, T, n*D) -> (B, n, T, D), through its qk norm (`norm`: q_norm / k_norm) if any."""
        if self.qk_norm == "all":
            return self._heads(getattr(self, norm)(t), n)
        t = self._heads(t, n)
        return getattr(self, norm)(t) if self.qk_norm == "head" else t

    def _project(self, x, memory, cache: LayerCache | None):
        q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        if not self.cross:
            q, k, v = self.qkv(x).split([q_dim, kv_dim, kv_dim], dim=-1)
            return (self._normed_heads(q, self.n_heads, "q_norm"),
                    self._normed_heads(k, self.n_kv_heads, "k_norm"), self._heads(v, self.n_kv_heads))
        q = self._normed_heads(self.q(x), self.n_heads, "q_norm")
        if cache is not None and cache.cross_k is not None:  # encoder K/V: computed once per source
            return q, cache.cross_k, cache.cross_v
        k, v = self.kv(memory).split([kv_dim, kv_dim], dim=-1)
        k, v = self._normed_heads(k, self.n_kv_heads, "k_norm"), self._heads(v, self.n_kv_heads)
        if cache is not None:
            cache.cross_k, cache.cross_v = k, v
        return q, k, v

    def forward(
        self,
        x: torch.Tensor,
        mask: AttentionMask,
        *,
        memory: torch.Tensor | None = None,
        positions: PositionTerms | None = None,
        cache: LayerCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, C) -> (out (B, T, C), weights (B, H, T, S) or None)."""
        b, t, _ = x.shape
        q, k, v = self._project(x, memory, cache)  # (B, H, T, D), (B, KV, S, D) x2
        if positions is not None and positions.rotates:
            q, k = positions.rotate(q), positions.rotate(k)
        if cache is not None and not self.cross:
            k, v = cache.append(k, v)  # (B, KV, past + T, D)
        dropout = self.dropout if self.training else 0.0
        weights = None
        if need_weights or self.tap is not None or self.softcap is not None:
            out, weights = self._explicit(q, k, v, mask, dropout)
        elif self.sinks is not None:
            out = sdpa_with_sinks(q, k, v, mask, self.sinks, self.scale, dropout)  # (B, H, T, D)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask.mask, dropout_p=dropout, is_causal=mask.is_causal, scale=self.scale,
                enable_gqa=self.n_kv_heads != self.n_heads,
            )  # (B, H, T, D)
        if mask.valid_rows is not None:  # a query with no visible key outputs zeros, never NaN
            out = out.masked_fill(~mask.valid_rows, 0.0)
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)  # concat heads: (B, T, C)
        if self.gate is not None:  # the output gate: (B, T, H * D) in (0, 1), per head feature
            out = out * torch.sigmoid(self.gate(x))
        if self.tap is not None:
            self.tap("heads_concat", out)
        return self.o(out), weights

    def _explicit(self, q, k, v, mask: AttentionMask, dropout: float):
        """softmax(cap(q k^T * scale) + mask) v, keeping the weights; the reference the fast path must
        match."""
        if self.tap is not None:
            for name, value in (("q", q), ("k", k), ("v", v)):  # k, v keep their KV heads (GQA)
                self.tap(name, value)
        groups = self.n_heads // self.n_kv_heads
        if groups > 1:  # each KV head serves `groups` query heads
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = (q @ k.transpose(-2, -1)) * self.scale  # (B, H, T, S)
        if self.softcap is not None:  # squash into (-c, c) before masking (Gemma 2)
            scores = self.softcap * torch.tanh(scores / self.softcap)
        scores = mask.apply(scores)
        safe = scores
        # all-masked rows: softmax over zeros, not -inf (NaN, also in backward)
        if mask.valid_rows is not None:
            safe = scores.masked_fill(~mask.valid_rows, 0.0)
        weights = safe.float().softmax(dim=-1) if self.sinks is None else softmax_with_sinks(safe.float(),
                                                                                             self.sinks)
        if mask.valid_rows is not None:
            weights = weights.masked_fill(~mask.valid_rows, 0.0)  # all-masked rows -> 0
        weights = weights.to(q.dtype)
        if self.tap is not None:
            self.tap("scores", scores)
            self.tap("weights", weights)
        out = F.dropout(weights, dropout, training=dropout > 0) @ v  # (B, H, T, D)
        if self.tap is not None:
            self.tap("heads", out)
        return out, weights
