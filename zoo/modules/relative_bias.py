"""T5's bucketed relative position bias: a learned score bias per head for each (key - query) distance
bucket. Exact buckets for short distances, logarithmic ones up to `rel_max_distance`, one last bucket beyond.
A bidirectional stack (encoder) splits the buckets between keys before and after the query; a causal one
(decoder) only ever sees keys at or before the query and spends every bucket on the past."""

from __future__ import annotations

import math

import torch
from torch import nn

from zoo.modules.position_terms import POSITIONALS, Positional, PositionTerms, query_key_distance


def relative_buckets(distance: torch.Tensor, *, causal: bool, n_buckets: int,
                     max_distance: int) -> torch.Tensor:
    """Bucket ids (same shape as `distance` = key - query) in [0, n_buckets)."""
    offset = torch.zeros_like(distance)
    if causal:
        span = (-distance).clamp(min=0)  # keys after the query are masked anyway: bucket 0
    else:
        n_buckets //= 2
        offset = (distance > 0).long() * n_buckets  # keys after the query use the upper half
        span = distance.abs()
    exact = n_buckets // 2
    # log-spaced buckets between `exact` and `max_distance`
    # (clamp(min=1) only keeps log() finite where unused)
    log_ratio = torch.log(span.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    far = (exact + (log_ratio * (n_buckets - exact)).long()).clamp(max=n_buckets - 1)
    return offset + torch.where(span < exact, span, far)


@POSITIONALS.register("t5_relative")
class T5RelativeBias(Positional):
    """Learned (bucket -> per-head bias) table, computed once per forward and shared by every layer."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.n_buckets, self.max_distance = cfg.positional.buckets, cfg.positional.max_distance
        self.relative_bias = nn.Embedding(self.n_buckets, cfg.n_heads)

    @classmethod
    def check_config(cls, cfg) -> None:
        buckets, max_distance = cfg.positional.buckets, cfg.positional.max_distance
        if buckets < 4 or buckets % 2:
            raise ValueError(f"model.positional.buckets must be an even integer >= 4 (T5 uses 32), got "
                             f"{buckets!r}.")
        exact = buckets // 4  # the smaller of the two cases (bidirectional)
        if max_distance <= 2 * exact:
            raise ValueError(f"model.positional.max_distance must be an integer > buckets / 2 = {2 * exact} "
                             f"(T5 uses 128), got {max_distance!r}.")

    def terms(self, position_ids: torch.Tensor, q_start: int, k_len: int, *, causal: bool) -> PositionTerms:
        device = self.relative_bias.weight.device
        distance = query_key_distance(q_start, position_ids.shape[-1], k_len, device)  # (Tq, Tk)
        buckets = relative_buckets(distance, causal=causal, n_buckets=self.n_buckets,
                                   max_distance=self.max_distance)
        return PositionTerms(bias=self.relative_bias(buckets).permute(2, 0, 1)[None])  # (1, H, Tq, Tk)

    def pattern(self, n: int) -> tuple[torch.Tensor, str]:
        bias = self.terms(torch.arange(n)[None], 0, n, causal=False).bias  # (1, H, n, n)
        return bias[0, 0].detach(), "key position (head 0 bias)"
