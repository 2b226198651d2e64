"""Balancing losses (`model.moe.balance`: one name or a list), added to the training loss.

- `aux`: the Switch / GShard auxiliary loss  aux_coef * n_experts * sum_i f_i * P_i, with f_i the share of
  the N * top_k routed assignments that chose expert i (before any capacity drop) and P_i the router's mean
  probability for expert i. 1 * aux_coef when perfectly balanced, whatever top_k (Switch's and DeepSeek's
  normalisation; transformers' load_balancing_loss_func is top_k times this);
- `z`: the router z-loss (ST-MoE)  z_coef * mean_t logsumexp(logits_t)^2, which keeps the logits small;
- `none`: nothing (the sigmoid_bias router balances without a loss)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.modules.moe.routers import Routing
from zoo.modules.moe.settings import MoESettings
from zoo.registry import Registry


@dataclass(frozen=True)
class Balance:
    """A named loss on the routing: `loss(routing, load, settings)` (load: assignments per expert (E,))."""

    reads: tuple[str, ...] = ()

    def loss(self, routing: Routing, load: torch.Tensor, settings: MoESettings) -> torch.Tensor | None:
        return None


class _Aux(Balance):
    def loss(self, routing: Routing, load: torch.Tensor, settings: MoESettings) -> torch.Tensor | None:
        share = load.float() / load.sum().clamp(min=1)  # f_i (E,): no gradient, a count
        mean_prob = routing.probs.mean(dim=0)  # P_i (E,)
        return settings.aux_coef * settings.n_experts * (share * mean_prob).sum()


class _Z(Balance):
    def loss(self, routing: Routing, load: torch.Tensor, settings: MoESettings) -> torch.Tensor | None:
        return settings.z_coef * routing.logits.logsumexp(dim=-1).square().mean()


BALANCES: Registry = Registry("balancing loss", key="model.moe.balance")
BALANCES.register("aux", _Aux(reads=("aux_coef",)))
BALANCES.register("z", _Z(reads=("z_coef",)))
BALANCES.register("none", Balance())
