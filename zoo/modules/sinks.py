"""Attention sinks (gpt-oss): each head h has a learned logit s_h that joins the softmax's denominator and is
dropped after, so a query may put weight on "nothing":  w_j = exp(a_j) / (exp(s_h) + sum_k exp(a_k)).

Explicit path: the sink is one more score column, softmaxed with the rest and cut off (`softmax_with_sinks`).
SDPA path (`sdpa_with_sinks`): SDPA takes no sink, so the sink becomes one extra key every query sees, its key
and value 0 and its score s_h put there by the additive mask (one column per head): q.k_sink * scale + s_h =
s_h, and the sink adds nothing to the output. (A 4-D contiguous mask keeps SDPA on its fused CPU kernel; the
gradient reaches the sinks through the mask.)"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.modules.mask import AttentionMask


def softmax_with_sinks(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """scores (B, H, T, S) masked (-inf), sinks (H,) -> weights (B, H, T, S) summing to at most 1 per row."""
    b, h, t, _ = scores.shape
    sink = sinks.to(scores.dtype).view(1, h, 1, 1).expand(b, h, t, 1)
    return torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1]  # (B, H, T, S): the sink dropped


def _sink_bias(mask: AttentionMask, sinks: torch.Tensor, t: int, s: int, dtype: torch.dtype, device
               ) -> torch.Tensor:
    """`mask` as an additive bias (B|1, H, T, 1 + S) whose first column, the sink key every query sees, is
    each head's sink logit."""
    bias = mask.apply(torch.zeros(1, 1, t, s, dtype=dtype, device=device))  # (B|1, 1|H, T, S): 0 or -inf
    lead, h = bias.shape[0], sinks.numel()
    sink = sinks.to(dtype).view(1, h, 1, 1).expand(lead, h, t, 1)
    return torch.cat([sink, bias.expand(lead, h, t, s)], dim=-1)  # contiguous, as the fused kernel wants


def sdpa_with_sinks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: AttentionMask,
                    sinks: torch.Tensor, scale: float, dropout: float) -> torch.Tensor:
    """q (B, H, T, D), k / v (B, KV, S, D), sinks (H,) -> (B, H, T, D), SDPA over one extra key per head."""
    t, s = q.shape[2], k.shape[2]
    k, v = F.pad(k, (0, 0, 1, 0)), F.pad(v, (0, 0, 1, 0))  # (B, KV, 1 + S, D): the sink key and value are 0
    bias = _sink_bias(mask, sinks, t, s, q.dtype, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout, scale=scale,
                                          enable_gqa=k.shape[1] != q.shape[1])
