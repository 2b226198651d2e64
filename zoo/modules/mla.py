"""Multi-head Latent Attention (DeepSeek-V2/V3), the `mla` entry of the token-mixer registry MIXERS.

Keys and values come from one latent per token: kv_a projects x (B, T, C) to a latent (B, T, L) and a rope key
(B, T, R) shared by every head; kv_b decompresses the normed latent into each head's no-rope key (N features)
and value (V). The query is full rank (`q`) or goes through its own normed latent (`q_a`, `q_b`,
`model.mixer.q_lora_rank`); each head's query is N no-rope features and R that RoPE rotates. Scores are
q.k over N + R features, scaled by 1/sqrt(N + R) (times YaRN's `mscale_all_dim` factor squared). Keys are
zoo.modules.mixer_settings.LatentAttentionSettings. Cross-attention (encoder-decoder) is plain attention
over the encoder output: its K/V are computed once per source, so a latent would save nothing.

Decoding with a cache (`model.mixer.cache`): `materialised` keeps each head's keys and values, H (N + R + V)
values per token and layer, as transformers does; `latent` keeps only [latent | rope key], L + R, and attends
with kv_b folded in ("weight absorption"): q_nope W_uk^h . latent = q_nope . k_nope^h, so scores are
[q_nope W_uk^h | q_rope] . [latent | k_rope], the softmax-weighted latent goes through W_uv^h to each head's
value. The same numbers, computed in another order."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from zoo.modules.cache import LayerCache
from zoo.modules.lora import applied_weight
from zoo.modules.mask import AttentionMask
from zoo.modules.mixer_settings import AttentionSettings
from zoo.modules.mixers import MIXERS
from zoo.modules.norm import make_norm
from zoo.modules.positional import POSITIONALS, PositionTerms
from zoo.modules.rope_scaling import ROPE_SCALINGS


@MIXERS.register("mla")
class LatentAttention(nn.Module):
    """q (B, H, T, N + R) against keys decompressed from the latent; see the module docstring."""

    tap: Callable[[str, torch.Tensor], None] | None = None  # set only while tracing
    cross = False
    # why trainer.strategy=fsdp_tp refuses it (zoo.training.tensor_parallel)
    tensor_parallel_refusal = ("its latent and rope key (kv_a, one norm over the whole latent) serve every "
                               "head, which the split of attention's q/k/v by heads does not cover")

    def __init__(self, cfg) -> None:
        super().__init__()
        s = cfg.mixer
        self.n_heads, self.latent_dim = cfg.n_heads, s.kv_lora_rank
        self.nope_dim, self.rope_dim, self.v_dim = s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim
        q_dim, bias = self.n_heads * (self.nope_dim + self.rope_dim), cfg.use_qkv_bias
        if s.q_lora_rank is None:
            self.q = nn.Linear(cfg.d_model, q_dim, bias=False)
        else:
            self.q_a = nn.Linear(cfg.d_model, s.q_lora_rank, bias=bias)
            self.q_norm = self._latent_norm(cfg, s.q_lora_rank)
            self.q_b = nn.Linear(s.q_lora_rank, q_dim, bias=False)
        self.kv_a = nn.Linear(cfg.d_model, self.latent_dim + self.rope_dim, bias=bias)
        self.kv_norm = self._latent_norm(cfg, self.latent_dim)
        self.kv_b = nn.Linear(self.latent_dim, self.n_heads * (self.nope_dim + self.v_dim), bias=False)
        self.o = nn.Linear(self.n_heads * self.v_dim, cfg.d_model, bias=bias)
        scaling = ROPE_SCALINGS.get(cfg.positional.scaling.name)(cfg) if hasattr(cfg.positional, "scaling") \
            else None
        self.scale = (self.nope_dim + self.rope_dim) ** -0.5 if s.scale is None else s.scale
        if s.scale is None and scaling is not None:
            self.scale *= scaling.all_dims_factor
        self.dropout = cfg.attention_dropout
        self.latent_cache = s.cache == "latent"

    @staticmethod
    def _latent_norm(cfg, dim: int) -> nn.Module:
        """A latent's norm, with the mixer's own epsilon where it sets one (model.mixer.latent_norm_eps)."""
        eps = cfg.mixer.latent_norm_eps
        return make_norm(cfg if eps is None else dataclasses.replace(cfg, norm_eps=eps), dim)

    def attention_widths(self) -> tuple[int, int]:
        """(q.k, weights.v) features summed over the heads, as it trains (the latent decompressed)."""
        return self.n_heads * (self.nope_dim + self.rope_dim), self.n_heads * self.v_dim

    @classmethod
    def cross_attention(cls, cfg) -> nn.Module:
        """The decoder's attention over the encoder output: attention with its defaults (n_heads of
        d_model // n_heads features, k/v projected from the memory once per source)."""
        return MIXERS.get("attention").cross_attention(dataclasses.replace(cfg, mixer=AttentionSettings()))

    @classmethod
    def check_config(cls, cfg) -> None:
        """What mla's keys say with the rest of the config (ValueError naming the key)."""
        s = cfg.mixer
        for key in ("n_kv_heads", "head_dim"):
            if getattr(cfg, key) is not None:
                raise ValueError(
                    f"model.{key}={getattr(cfg, key)} is attention's; model.mixer=mla has one latent for all "
                    "heads (model.mixer.kv_lora_rank) and sizes each head with model.mixer.qk_nope_head_dim, "
                    f"qk_rope_head_dim and v_head_dim: drop model.{key} (null).")
        decompressed = cfg.n_heads * (s.qk_nope_head_dim + s.v_head_dim)
        if s.kv_lora_rank >= decompressed:
            raise ValueError(
                f"model.mixer.kv_lora_rank={s.kv_lora_rank} must be smaller than the keys and values it "
                f"compresses: model.n_heads x (qk_nope_head_dim + v_head_dim) = {cfg.n_heads} x "
                f"({s.qk_nope_head_dim} + {s.v_head_dim}) = {decompressed}.")
        queries = cfg.n_heads * (s.qk_nope_head_dim + s.qk_rope_head_dim)
        if s.q_lora_rank is not None and s.q_lora_rank >= min(queries, cfg.d_model):
            raise ValueError(
                f"model.mixer.q_lora_rank={s.q_lora_rank} must be smaller than what it compresses: "
                f"model.d_model={cfg.d_model} and the queries, model.n_heads x (qk_nope_head_dim + "
                f"qk_rope_head_dim) = {queries}; or null for a full-rank query.")
        if not POSITIONALS.get(cfg.positional.name).rotates:
            raise ValueError(
                f"model.mixer=mla carries position by rotating its model.mixer.qk_rope_head_dim features, "
                f"which model.positional={cfg.positional.name} does not do; choose model.positional=rope.")
        if cfg.positional.fraction != 1.0:
            raise ValueError(
                f"model.positional.fraction={cfg.positional.fraction}: model.mixer=mla rotates all of its "
                "model.mixer.qk_rope_head_dim features (and none of qk_nope_head_dim); set the rope part's "
                "size there and keep fraction 1.0.")

    # ----- projections -----
    def _query(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, C) -> q (B, H, T, N + R)."""
        b, t, _ = x.shape
        q = self.q(x) if hasattr(self, "q") else self.q_b(self.q_norm(self.q_a(x)))
        return q.view(b, t, self.n_heads, self.nope_dim + self.rope_dim).transpose(1, 2)

    def _latent(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, C) -> normed latent (B, 1, T, L) and the shared rope key (B, 1, T, R), unrotated."""
        latent, k_rope = self.kv_a(x).split([self.latent_dim, self.rope_dim], dim=-1)
        return self.kv_norm(latent)[:, None], k_rope[:, None]

    def _expand(self, latent: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """latent (B, 1, S, L), rotated k_rope (B, 1, S, R) -> k (B, H, S, N + R), v (B, H, S, V)."""
        b, _, s, _ = latent.shape
        kv = self.kv_b(latent[:, 0]).view(b, s, self.n_heads, self.nope_dim + self.v_dim).transpose(1, 2)
        k_nope, v = kv.split([self.nope_dim, self.v_dim], dim=-1)
        return torch.cat([k_nope, k_rope.expand(b, self.n_heads, s, self.rope_dim)], dim=-1), v

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
        """x (B, T, C) -> (out (B, T, C), weights (B, H, T, S) or None), as Attention's."""
        b, t, _ = x.shape
        q = self._query(x)
        latent, k_rope = self._latent(x)
        if positions is not None and positions.rotates:  # only the rope part; the key's is shared
            q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)
            q = torch.cat([q_nope, positions.rotate(q_rope)], dim=-1)
            k_rope = positions.rotate(k_rope)
        if cache is not None and self.latent_cache:  # the cache's key slot holds [latent | k_rope]
            joint, _ = cache.append(torch.cat([latent, k_rope], dim=-1), latent[..., :0])  # value slot: empty
            if self._absorbs(t):
                out, weights = self._absorbed(q, joint, mask, need_weights)  # (B, H, T, V)
            else:  # a long chunk (the prompt): decompress the cached latent, as without a cache
                k, v = self._expand(*joint.split([self.latent_dim, self.rope_dim], dim=-1))
                out, weights = self._attend(q, k, v, mask, need_weights)
        else:
            k, v = self._expand(latent, k_rope)
            if cache is not None:
                k, v = cache.append(k, v)  # (B, H, past + T, N + R), (B, H, past + T, V)
            out, weights = self._attend(q, k, v, mask, need_weights)  # (B, H, T, V)
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.v_dim)  # concat heads: (B, T, H * V)
        if self.tap is not None:
            self.tap("heads_concat", out)
        return self.o(out), weights

    def _absorbs(self, t: int) -> bool:
        """Whether T new queries over S cached positions cost fewer multiply-adds folded (per head and query:
        S (2L + R)) than with the latent decompressed (S L (N + V) per position, then S (N + R + V) per head
        and query): T (2L - N - V) < L (N + V). Decoding (T = 1, a few draft tokens) folds; a prompt does
        not."""
        return t * (2 * self.latent_dim - self.nope_dim - self.v_dim) < self.latent_dim * (self.nope_dim
                                                                                         + self.v_dim)

    def _absorbed(self, q: torch.Tensor, joint: torch.Tensor, mask: AttentionMask, need_weights: bool):
        """q (B, H, T, N + R) over cached [latent | k_rope] (B, 1, S, L + R) with kv_b folded in: the query's
        no-rope part through each head's W_uk (N x L), the weighted latent through its W_uv (L x V). The
        heads share the one latent, so they are folded into the query rows: one (H T, S) product, no copy of
        the cache per head."""
        b, h, t, _ = q.shape
        w = applied_weight(self.kv_b).view(h, self.nope_dim + self.v_dim, self.latent_dim)
        w_uk, w_uv = w.split([self.nope_dim, self.v_dim], dim=1)  # (H, N, L), (H, V, L)
        q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)
        q_joint = torch.cat([q_nope @ w_uk, q_rope], dim=-1)  # (B, H, T, L + R)
        scores = q_joint.reshape(b, 1, h * t, -1) @ joint.transpose(-2, -1)  # (B, 1, H T, S)
        weights = self._softmax(scores.view(b, h, t, -1) * self.scale, mask)  # (B, H, T, S)
        dropout = self.dropout if self.training else 0.0
        dropped = F.dropout(weights, dropout, training=dropout > 0).reshape(b, 1, h * t, -1)
        out = (dropped @ joint[..., : self.latent_dim]).view(b, h, t, self.latent_dim)  # (B, H, T, L)
        if mask.valid_rows is not None:
            out = out.masked_fill(~mask.valid_rows, 0.0)
        return out @ w_uv.transpose(1, 2), weights if need_weights else None  # (B, H, T, V)

    def _softmax(self, scores: torch.Tensor, mask: AttentionMask) -> torch.Tensor:
        """Masked softmax of scores (B, H, T, S) in float32, rows without a visible key all zero."""
        scores = mask.apply(scores)
        safe = scores if mask.valid_rows is None else scores.masked_fill(~mask.valid_rows, 0.0)
        weights = safe.float().softmax(dim=-1)
        if mask.valid_rows is not None:
            weights = weights.masked_fill(~mask.valid_rows, 0.0)
        weights = weights.to(scores.dtype)
        if self.tap is not None:
            self.tap("scores", scores)
            self.tap("weights", weights)
        return weights

    def _attend(self, q, k, v, mask: AttentionMask, need_weights: bool):
        """softmax(q k^T * scale + mask) v with dropout; the explicit path (need_weights, tracing) keeps the
        weights, else scaled_dot_product_attention. A query with no visible key outputs zeros."""
        dropout = self.dropout if self.training else 0.0
        weights = None
        if need_weights or self.tap is not None:
            if self.tap is not None:
                for name, value in (("q", q), ("k", k), ("v", v)):
                    self.tap(name, value)
            weights = self._softmax((q @ k.transpose(-2, -1)) * self.scale, mask)  # (B, H, T, S)
            out = F.dropout(weights, dropout, training=dropout > 0) @ v
            if self.tap is not None:
                self.tap("heads", out)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.mask, dropout_p=dropout,
                                                 is_causal=mask.is_causal, scale=self.scale)
        if mask.valid_rows is not None:
            out = out.masked_fill(~mask.valid_rows, 0.0)
        return out, weights
