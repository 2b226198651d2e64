"""Positional schemes, chosen by name through POSITIONALS.

A scheme acts in one or two places: `add` puts an absolute term on the token embeddings (sinusoidal,
learned), `terms` gives attention a per-forward rotation of q/k (RoPE) or a score bias (ALiBi). Both are
computed once per forward and shared by every layer."""

from __future__ import annotations

import math

import torch
from torch import nn

from zoo.registry import Registry

POSITIONALS: Registry = Registry("positional")


def sinusoid_angles(position_ids: torch.Tensor, dim: int, base: float) -> torch.Tensor:
    """pos / base^(2i/dim) for i < dim/2: (..., T) -> (..., T, dim/2), float32."""
    inv_freq = base ** (-torch.arange(0, dim, 2, device=position_ids.device, dtype=torch.float32) / dim)
    return position_ids.to(torch.float32)[..., None] * inv_freq


class PositionTerms:
    """What attention needs from the positional scheme for one forward pass."""

    def __init__(self, cos=None, sin=None, layout: str = "half", bias: torch.Tensor | None = None) -> None:
        self.cos, self.sin, self.layout = cos, sin, layout  # (B, 1, T, D/2)
        self.bias = bias  # (1, H, Tq, Tk) additive score bias or None

    @property
    def rotates(self) -> bool:
        return self.cos is not None

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """Rotate feature pairs of q or k (B, H, T, D) by their position's angles."""
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        if self.layout == "half":  # pairs (i, i + D/2)
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        x1, x2 = x[..., 0::2], x[..., 1::2]  # pairs (2i, 2i+1)
        return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)


class Positional(nn.Module):
    """No positional information (the base for every scheme)."""

    def __init__(self, cfg) -> None:
        super().__init__()

    def add(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return x

    def terms(self, position_ids: torch.Tensor, q_start: int, k_len: int) -> PositionTerms | None:
        return None


@POSITIONALS.register("sinusoidal")
class Sinusoidal(Positional):
    """Fixed sin/cos of geometric frequencies (Vaswani et al.); any length, no parameters."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.dim, self.layout = cfg.d_model, cfg.sinusoidal_layout

    def encoding(self, position_ids: torch.Tensor) -> torch.Tensor:
        """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) in the interleaved layout."""
        angles = sinusoid_angles(position_ids, self.dim, 10000.0)  # (B, T, d/2)
        if self.layout == "interleaved":
            return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)
        return torch.cat([angles.sin(), angles.cos()], dim=-1)

    def add(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return x + self.encoding(position_ids).to(x.dtype)


@POSITIONALS.register("learned")
class Learned(Positional):
    """A trained table of max_seq_len vectors (GPT-2, BERT); `pos_offset` shifts the index (BART)."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.offset = cfg.pos_offset
        self.table = nn.Embedding(cfg.max_seq_len + cfg.pos_offset, cfg.d_model)

    def add(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return x + self.table(position_ids + self.offset)


@POSITIONALS.register("rope")
class Rotary(Positional):
    """Rotary embeddings: q and k rotated by position, so q.k depends only on the offset."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.head_dim, self.base, self.layout = cfg.head_dim, cfg.rope_base, cfg.rope_layout

    def terms(self, position_ids: torch.Tensor, q_start: int, k_len: int) -> PositionTerms:
        angles = sinusoid_angles(position_ids, self.head_dim, self.base)[:, None]  # (B, 1, T, D/2)
        return PositionTerms(angles.cos(), angles.sin(), self.layout)


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

    def terms(self, position_ids: torch.Tensor, q_start: int, k_len: int) -> PositionTerms:
        device = self.slopes.device
        q_idx = torch.arange(q_start, q_start + position_ids.shape[-1], device=device)
        k_idx = torch.arange(k_len, device=device)
        distance = (q_idx[:, None] - k_idx[None, :]).abs().float()  # (Tq, Tk)
        return PositionTerms(bias=(-self.slopes[:, None, None] * distance)[None])  # (1, H, Tq, Tk)


POSITIONALS.register("none", Positional)
