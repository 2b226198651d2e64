"""What every positional scheme shares: the POSITIONALS registry (model.positional's name -> scheme), the
terms a scheme hands attention (`PositionTerms`), the base class every scheme overrides where it acts, and
the angles and distances the schemes compute from. The schemes: zoo.modules.positional (and
zoo.modules.relative_bias)."""

from __future__ import annotations

import torch
from torch import nn

from zoo.registry import Registry

POSITIONALS: Registry = Registry("positional", key="model.positional")


def sinusoid_angles(position_ids: torch.Tensor, dim: int, base: float) -> torch.Tensor:
    """pos / base^(2i/dim) for i < dim/2: (..., T) -> (..., T, dim/2), float32."""
    inv_freq = base ** (-torch.arange(0, dim, 2, device=position_ids.device, dtype=torch.float32) / dim)
    return position_ids.to(torch.float32)[..., None] * inv_freq


class PositionTerms:
    """What attention needs from the positional scheme for one forward pass."""

    def __init__(self, cos=None, sin=None, layout: str = "half", bias: torch.Tensor | None = None) -> None:
        self.cos, self.sin, self.layout = cos, sin, layout  # (B, 1, T, R/2): R rotated features of each head
        self.bias = bias  # (1 | B, H, Tq, Tk) additive score bias or None
        self.local: PositionTerms | None = None  # the sliding-window layers' own terms (local_base)

    def for_layer(self, local: bool) -> PositionTerms:
        """The terms of a sliding-window (`local`) or global layer: Gemma 3 rotates them at two bases."""
        return self.local if local and self.local is not None else self

    @property
    def rotates(self) -> bool:
        return self.cos is not None

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """Rotate feature pairs of the first R features of q or k (B, H, T, D) by their position's angles;
        features R.. pass unchanged (partial rotary, GPT-NeoX)."""
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        rotated = 2 * cos.shape[-1]
        if rotated < x.shape[-1]:
            return torch.cat([self.rotate(x[..., :rotated]), x[..., rotated:]], dim=-1)
        if self.layout == "half":  # pairs (i, i + R/2)
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        x1, x2 = x[..., 0::2], x[..., 1::2]  # pairs (2i, 2i+1)
        return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)


class Positional(nn.Module):
    """No positional information: the base every scheme overrides where it acts."""

    adds_to_embeddings = False  # puts an absolute vector on each token embedding
    rotates = False  # rotates q and k per position (what a RoPE frequency scaling needs)

    def __init__(self, cfg) -> None:
        super().__init__()
        self.max_positions: int | None = None  # None: any length
        # a KV cache written while the sequence was at most this long is stale past it (LongRoPE switches
        # factors): generation re-runs the sequence once there, as transformers' Phi-3 does
        self.stale_after: int | None = None

    def check_span(self, start: int, length: int, name: str) -> None:
        """Positions start .. start+length-1 are implied for `name` (no explicit position_ids)."""

    def check_position_ids(self, position_ids: torch.Tensor) -> None:
        """Explicit position ids (left-padded batches) are within what the scheme covers."""

    def default_position_ids(self, ids: torch.Tensor, start: int,
                             attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Positions of `ids` (B, T) when the caller gives none: start..start+T-1 in every row."""
        b, t = ids.shape
        return torch.arange(start, start + t, device=ids.device).expand(b, t)

    def add(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return x

    def terms(self, position_ids: torch.Tensor, q_start: int, k_len: int, *,
              causal: bool) -> PositionTerms | None:
        """Rotation / score bias for queries at q_start.. and keys 0..k_len-1; `causal` for directional
        biases."""
        return None

    def pattern(self, n: int) -> tuple[torch.Tensor, str] | None:
        """(n positions, features) picture of the scheme and the feature axis label, or None (nothing to
        draw)."""
        return None

    def similarity(self, positions: torch.Tensor) -> torch.Tensor | None:
        """Dot product of position 0's encoding with each of `positions` (1, K), or None if undefined."""
        return None


def query_key_distance(q_start: int | torch.Tensor, q_len: int, k_len: int, device) -> torch.Tensor:
    """(Tq, Tk) signed distance key - query for queries at q_start.. and keys 0..k_len-1. `q_start` may be a
    0-d / (1,) tensor (a compiled decode step: the position changes without recompiling)."""
    q_idx = q_start + torch.arange(q_len, device=device)
    return torch.arange(k_len, device=device)[None, :] - q_idx[:, None]
