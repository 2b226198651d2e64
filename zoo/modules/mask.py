"""Attention masks: causal structure, key padding and positional score bias combined once per forward."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMask:
    """What one attention call needs; built once per forward and shared by every layer of a stack."""

    mask: torch.Tensor | None = None  # bool (B|1, 1, Tq, Tk), True = may attend; or float additive bias
    is_causal: bool = False  # plain causal square mask: lets SDPA pick its fastest kernel
    valid_rows: torch.Tensor | None = None  # (B|1, 1, Tq|1, 1): rows with at least one visible key

    def apply(self, scores: torch.Tensor) -> torch.Tensor:
        """Explicit path: add the bias and put -inf on every masked score (B, H, Tq, Tk)."""
        if self.is_causal:
            q_len, k_len = scores.shape[-2:]
            future = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).triu(1 + k_len - q_len)
            return scores.masked_fill(future, float("-inf"))
        if self.mask is None:
            return scores
        if self.mask.dtype == torch.bool:
            return scores.masked_fill(~self.mask, float("-inf"))
        return scores + self.mask


def build_mask(
    key_mask: torch.Tensor | None,
    *,
    causal: bool,
    q_len: int,
    k_len: int,
    bias: torch.Tensor | None = None,
) -> AttentionMask:
    """Combine key padding (B, Tk) (1 = real token), causality (the last q_len of k_len positions) and an
    additive bias (1, H, Tq, Tk) into one mask. Queries only ever see keys at or before their own index."""
    allowed = None
    if key_mask is not None:
        if key_mask.shape[-1] != k_len:
            raise ValueError(f"attention_mask covers {key_mask.shape[-1]} positions but there are {k_len} keys.")
        allowed = key_mask.bool()[:, None, None, :]  # (B, 1, 1, Tk)
    if causal and q_len > 1:  # one new query after a cache sees every cached key: no causal mask needed
        if allowed is None and bias is None and q_len == k_len:
            return AttentionMask(is_causal=True)
        device = key_mask.device if key_mask is not None else (bias.device if bias is not None else None)
        tri = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)  # (Tq, Tk)
        allowed = tri if allowed is None else allowed & tri
    valid = allowed.any(-1, keepdim=True) if key_mask is not None else None
    if bias is None:
        return AttentionMask(allowed, valid_rows=valid)
    if allowed is not None:
        bias = bias.masked_fill(~allowed, float("-inf"))
    return AttentionMask(bias, valid_rows=valid)
