"""Positional schemes, chosen by name through POSITIONALS.

A scheme owns every question about itself: its keys are its settings class under `model.positional`
(zoo.modules.positional_settings), what else it needs of the config (`check_config`), how far its positions
reach (`max_positions`) and how explicit position ids are checked, whether it adds an absolute term to the
token embeddings (`add`), rotates q/k or biases attention scores (`terms`, computed once per forward and
shared by every layer), and how it is drawn (`pattern`, `similarity`). Nothing outside this file compares
a scheme's name; a new scheme is one class here plus its registry entry."""

from __future__ import annotations

import math

import torch
from torch import nn

import zoo.modules.relative_bias  # noqa: F401  (registers t5_relative)
from zoo.modules.position_terms import (  # noqa: F401  (re-exported: the schemes' shared names)
    POSITIONALS,
    Positional,
    PositionTerms,
    query_key_distance,
    sinusoid_angles,
)
from zoo.modules.rope_scaling import ROPE_SCALINGS, rotary_dims
from zoo.utils import check_range


@POSITIONALS.register("sinusoidal")
class Sinusoidal(Positional):
    """Fixed sin/cos of geometric frequencies (Vaswani et al.); any length, no parameters."""

    adds_to_embeddings = True

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.dim, self.layout = cfg.d_model, cfg.positional.layout

    @classmethod
    def check_config(cls, cfg) -> None:
        if cfg.d_model % 2:
            raise ValueError(f"model.positional='sinusoidal' needs an even d_model, got {cfg.d_model}.")

    def encoding(self, position_ids: torch.Tensor) -> torch.Tensor:
        """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) in the interleaved layout."""
        angles = sinusoid_angles(position_ids, self.dim, 10000.0)  # (B, T, d/2)
        if self.layout == "interleaved":
            return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)
        return torch.cat([angles.sin(), angles.cos()], dim=-1)

    def add(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return x + self.encoding(position_ids).to(x.dtype)

    def pattern(self, n: int) -> tuple[torch.Tensor, str]:
        return self.encoding(torch.arange(n)[None])[0], "dimension"  # (n, d_model)

    def similarity(self, positions: torch.Tensor) -> torch.Tensor:
        pe = self.encoding(positions)[0]  # (K, d_model)
        return pe @ pe[0]


@POSITIONALS.register("learned")
class Learned(Positional):
    """A trained table of max_seq_len vectors (GPT-2, BERT); `offset` shifts the index (BART 2; RoBERTa
    pad_id + 1). With `skip_pads` (RoBERTa) positions count only the real tokens and pads read row
    pad_id."""

    adds_to_embeddings = True

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.offset = cfg.positional.offset
        self.max_positions = cfg.max_seq_len
        self.table = nn.Embedding(cfg.max_seq_len + self.offset, cfg.d_model)
        self.skip_pads, self.pad_row = cfg.positional.skip_pads, cfg.pad_id

    @classmethod
    def check_config(cls, cfg) -> None:
        rows = cfg.max_seq_len + cfg.positional.offset
        if cfg.positional.skip_pads and cfg.pad_id >= rows:
            raise ValueError(f"model.positional.skip_pads=true gives pads table row model.pad_id="
                             f"{cfg.pad_id}, but the table has model.max_seq_len + model.positional.offset = "
                             f"{rows} rows.")

    def default_position_ids(self, ids: torch.Tensor, start: int,
                             attention_mask: torch.Tensor | None) -> torch.Tensor:
        """With pos_skip_pads, a token's position is the number of real tokens (attention_mask, past + new)
        before it, and a pad's is the one that reads row pad_id: RoBERTa's ids for a tokenizer's mask (ids !=
        pad_id)."""
        if not self.skip_pads or attention_mask is None:
            return super().default_position_ids(ids, start, attention_mask)
        real = attention_mask.bool()  # (B, past + T)
        counted = real.long().cumsum(-1) - 1
        return counted.masked_fill(~real, self.pad_row - self.offset)[:, start:]  # (B, T)

    def check_span(self, start: int, length: int, name: str) -> None:
        if start + length > self.max_positions:
            raise ValueError(
                f"{name} reaches position {start + length} but learned positions stop at model.max_seq_len="
                f"{self.max_positions}; shorten the input or raise max_seq_len."
            )

    def check_position_ids(self, position_ids: torch.Tensor) -> None:
        n = self.max_positions
        check_range(position_ids, n,
                    lambda lo, hi: f"position_ids hold positions in [{lo}, {hi}] but learned "
                                   f"positions cover [0, {n}) (model.max_seq_len={n}).")

    def add(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return x + self.table(position_ids + self.offset)

    def pattern(self, n: int) -> tuple[torch.Tensor, str]:
        return self.table.weight.detach()[self.offset: self.offset + min(n, self.max_positions)], "dimension"


@POSITIONALS.register("rope")
class Rotary(Positional):
    """Rotary embeddings: q and k rotated by position, so q.k depends only on the offset. Only the first
    `fraction` of each head's features rotate (GPT-NeoX 0.25, Phi-2 0.4); `scaling` stretches the
    frequencies for a longer context (zoo/modules/rope_scaling.py). With `local_base` the sliding-window
    layers rotate at their own base, unscaled (Gemma 3: 10000 local, 1e6 global)."""

    rotates = True
    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.head_dim, self.rotary_dim = cfg.head_size, rotary_dims(cfg)
        rope = cfg.positional
        self.base, self.layout, self.local_base = rope.base, rope.layout, rope.local_base
        self.scaling = ROPE_SCALINGS.get(rope.scaling.name)(cfg)
        self.stale_after = self.scaling.stale_after

    @classmethod
    def check_config(cls, cfg) -> None:
        rotated, rope = rotary_dims(cfg), cfg.positional
        if rotated < 2 or rotated % 2:
            raise ValueError(
                "model.positional=rope rotates int(head size * model.positional.fraction) = "
                f"int({cfg.head_size} * {rope.fraction}) = {rotated} features per head; that must be "
                f"even and >= 2 (head size: model.head_dim or d_model // n_heads).")
        if rope.local_base is not None and not any(map(cfg.layer_is_local, range(cfg.n_layers))):
            raise ValueError(f"model.positional.local_base={rope.local_base!r} is the base of the sliding-"
                             "window layers, but no layer is local (model.mixer.sliding_window is null, or "
                             "model.layer_pattern tags every layer global); give local layers or drop it.")
        ROPE_SCALINGS.get(rope.scaling.name).check_config(cfg)

    def inv_freq(self, device=None, base: float | None = None,
                 position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(R/2,) angle per position of each rotated pair: 1 / base^(2i/R), then the scaling for a forward
        over `position_ids` (float32); with `base` (the local layers'), unscaled."""
        exponents = torch.arange(0, self.rotary_dim, 2, device=device, dtype=torch.float32) / self.rotary_dim
        if base is not None:
            return 1.0 / base**exponents
        return self.scaling.inv_freq(1.0 / self.base**exponents, position_ids)

    def rotation(self, position_ids: torch.Tensor, inv_freq: torch.Tensor, factor: float) -> PositionTerms:
        """cos and sin (B, 1, T, R/2) of each position's angles, times `factor` (YaRN's attention factor)."""
        angles = position_ids.to(torch.float32)[:, None, :, None] * inv_freq
        cos, sin = angles.cos(), angles.sin()
        if factor != 1.0:
            cos, sin = cos * factor, sin * factor
        return PositionTerms(cos, sin, self.layout)

    def terms(self, position_ids: torch.Tensor, q_start: int, k_len: int, *, causal: bool) -> PositionTerms:
        device = position_ids.device
        terms = self.rotation(position_ids, self.inv_freq(device, position_ids=position_ids),
                              self.scaling.attention_factor)
        if self.local_base is not None:
            terms.local = self.rotation(position_ids, self.inv_freq(device, self.local_base), 1.0)
        return terms

    def pattern(self, n: int) -> tuple[torch.Tensor, str]:
        terms = self.terms(torch.arange(n)[None], 0, n, causal=False)
        return terms.cos[0, 0], "rotation pair (cos of angle)"  # (n, R / 2)

    def similarity(self, positions: torch.Tensor) -> torch.Tensor:
        """rotate(q, 0) . rotate(k, k) with q = k = ones: RoFormer's long-range decay."""
        terms = self.terms(positions, 0, positions.shape[-1], causal=False)
        rotated = terms.rotate(torch.ones(1, 1, positions.shape[-1], self.head_dim))[0, 0]  # (K, D)
        return rotated @ rotated[0]


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Head slopes 2^(-8/n * (i+1)); non-powers of two interleave the next power's slopes (Press et al.)."""
    closest = 2 ** math.floor(math.log2(n_heads))
    slopes = [2 ** (-8.0 / closest * (i + 1)) for i in range(closest)]
    extra = [2 ** (-4.0 / closest * (2 * i + 1)) for i in range(n_heads - closest)]
    return torch.tensor(slopes + extra)


@POSITIONALS.register("alibi")
class ALiBi(Positional):
    """A linear distance penalty on attention scores, one slope per head; no embedding term."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.register_buffer("slopes", alibi_slopes(cfg.n_heads), persistent=False)

    def terms(self, position_ids: torch.Tensor, q_start: int, k_len: int, *, causal: bool) -> PositionTerms:
        distance = query_key_distance(q_start, position_ids.shape[-1], k_len,
                                      self.slopes.device).abs().float()
        return PositionTerms(bias=(-self.slopes[:, None, None] * distance)[None])  # (1, H, Tq, Tk)

    def pattern(self, n: int) -> tuple[torch.Tensor, str]:
        bias = self.terms(torch.arange(n)[None], 0, n, causal=False).bias  # (1, H, n, n)
        return bias[0, 0], "key position (head 0 bias)"


POSITIONALS.register("none", Positional)
