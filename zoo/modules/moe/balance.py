"""Balancing losses (`model.ffn.balance`: loss name -> coefficient; `{}` for none, as the sigmoid_bias router
balances without a loss), each added to the training loss times its coefficient.

- `aux`: the Switch / GShard auxiliary loss  n_experts * sum_i f_i * P_i, with f_i the share of the
  N * top_k routed assignments that chose expert i (before any capacity drop) and P_i the router's mean
  probability for expert i. 1 when perfectly balanced, whatever top_k (Switch's and DeepSeek's
  normalisation; transformers' load_balancing_loss_func is top_k times this);
- `z`: the router z-loss (ST-MoE)  mean_t logsumexp(logits_t)^2, which keeps the logits small."""

from __future__ import annotations

from collections.abc import Callable

import torch

from zoo.modules.moe.routers import Routing
from zoo.registry import Registry

# name -> loss(routing, load) before its coefficient (load: assignments per expert (E,), a count)
BALANCES: Registry[Callable[[Routing, torch.Tensor], torch.Tensor]] = Registry("balancing loss",
                                                                              key="model.ffn.balance")


@BALANCES.register("aux")
def aux_loss(routing: Routing, load: torch.Tensor) -> torch.Tensor:
    share = load.float() / load.sum().clamp(min=1)  # f_i (E,): no gradient, a count
    mean_prob = routing.probs.mean(dim=0)  # P_i (E,)
    return load.numel() * (share * mean_prob).sum()


@BALANCES.register("z")
def z_loss(routing: Routing, load: torch.Tensor) -> torch.Tensor:
    return routing.logits.logsumexp(dim=-1).square().mean()
