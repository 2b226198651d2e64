"""Attention sinks (gpt-oss): each head h has a learned logit s_h that joins the softmax's denominator and is
dropped after, so a query may put weight on "nothing":  w_j = exp(a_j) / (exp(s_h) + sum_k exp(a_k)).

Explicit path: the sink is one more score column, softmaxed with the rest and cut off (`softmax_with_sinks`).
SDPA path (`sdpa_with_sinks`): SDPA takes no sink, so the sink becomes one extra key every query sees. q gets
one more feature s_h / scale, every real key a 0 there, the sink key 1 there and 0 elsewhere, its value 0:
q'.k_j = q.k_j, q'.k_sink * scale = s_h, and the sink adds nothing to the output."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.modules.mask import AttentionMask


def softmax_with_sinks(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """scores (B, H, T, S) masked (-inf), sinks (H,) -> weights (B, H, T, S) summing to at most 1 per row."""
    b, h, t, _ = scores.shape
    sink = sinks.to(scores.dtype).view(1, h, 1, 1).expand(b, h, t, 1)
    return torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1]  # (B, H, T, S): the sink dropped


def _sink_mask(mask: AttentionMask, t: int, s: int, device) -> torch.Tensor:
    """`mask` as an explicit (..., T, 1 + S) mask whose first column (the sink key) every query sees."""
    m = mask.mask
    if mask.is_causal:  # the last T of S positions, each seeing itself and what is before
        m = torch.ones(t, s, dtype=torch.bool, device=device).tril(s - t)
    if m is None:
        m = torch.ones(t, s, dtype=torch.bool, device=device)
    return F.pad(m, (1, 0), value=True if m.dtype == torch.bool else 0.0)


def sdpa_with_sinks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: AttentionMask,
                    sinks: torch.Tensor, scale: float, dropout: float) -> torch.Tensor:
    """q (B, H, T, D), k / v (B, KV, S, D), sinks (H,) -> (B, H, T, D), SDPA over one extra key per head."""
    b, h, t, _ = q.shape
    kv, s = k.shape[1], k.shape[2]
    sink = (sinks.to(q.dtype) / scale).view(1, h, 1, 1).expand(b, h, t, 1)
    q = torch.cat([q, sink], dim=-1)  # (B, H, T, D + 1)
    k = F.pad(k, (0, 1))  # (B, KV, S, D + 1): real keys 0 in the sink feature
    sink_key = k.new_zeros(b, kv, 1, k.shape[-1])
    sink_key[..., -1] = 1.0
    k = torch.cat([sink_key, k], dim=2)  # (B, KV, 1 + S, D + 1)
    v = F.pad(v, (0, 0, 1, 0))  # (B, KV, 1 + S, D): the sink's value is 0
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_sink_mask(mask, t, s, q.device),
                                          dropout_p=dropout, scale=scale, enable_gqa=kv != h)
