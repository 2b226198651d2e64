"""Dropless (or capacity-bounded) dispatch: the N * top_k (token, expert) assignments sorted by expert, each
expert run once over its contiguous block of tokens (one matmul pair per expert, no loop over tokens), the
outputs weighted and summed back per token with one index_add.

Capacity (`capacity_factor` c): expert i keeps at most ceil(c * N * top_k / E) assignments. Priority is
GShard's: every token's first choice before any second choice, and within one choice earlier tokens first
(the assignments are laid out choice-major, and the sort by expert is stable). A dropped assignment adds
nothing to its token (the residual carries it); the weights of the kept ones are not renormalised."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from zoo.modules.moe.routers import Routing


@dataclass
class Dispatched:
    """The combined expert output (N, C), the assignments each expert was sent (E,) before any drop, and how
    many assignments the capacity dropped (a 0-dim tensor)."""

    out: torch.Tensor
    load: torch.Tensor
    dropped: torch.Tensor


def capacity(tokens: int, top_k: int, n_experts: int, factor: float) -> int:
    """Assignments one expert keeps: ceil(factor * tokens * top_k / n_experts)."""
    return math.ceil(factor * tokens * top_k / n_experts)


def dispatch(x: torch.Tensor, routing: Routing, experts: nn.ModuleList,
             capacity_factor: float | None = None) -> Dispatched:
    """x (N, C) through the experts `routing` chose; see the module docstring."""
    n, k = routing.experts.shape
    n_experts = len(experts)
    flat = routing.experts.t().reshape(-1)  # (k*N,) choice-major: every first choice, then every second...
    order = torch.argsort(flat, stable=True)  # assignments grouped by expert, priority kept inside a group
    load = torch.bincount(flat, minlength=n_experts)  # (E,)
    dropped = torch.zeros((), dtype=torch.long, device=x.device)
    if capacity_factor is not None:
        cap = capacity(n, k, n_experts, capacity_factor)
        start = torch.cumsum(load, 0) - load  # (E,) where each expert's group begins in `order`
        rank = torch.arange(order.numel(), device=x.device) - start.repeat_interleave(load)
        keep = rank < cap
        order = order[keep]
        dropped = (~keep).sum()
        sizes = load.clamp(max=cap)
    else:
        sizes = load
    token = order % n  # (A,) the token of each kept assignment, grouped by expert
    choice = order // n
    chunks = x[token].split(sizes.tolist())  # one (n_i, C) block per expert (possibly empty)
    # every expert runs, an empty block too: each parameter takes part in the graph (DDP needs no
    # find_unused_parameters) at the cost of a few empty kernels
    y = torch.cat([expert(chunk) for expert, chunk in zip(experts, chunks, strict=True)])  # (A, C)
    y = y * routing.weights[token, choice].unsqueeze(-1)
    out = torch.zeros_like(x).index_add_(0, token, y.to(x.dtype))
    return Dispatched(out, load, dropped)
