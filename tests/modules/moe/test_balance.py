"""The balancing losses on a worked example: Switch/GShard's n_experts * sum_i f_i * P_i (with transformers'
load_balancing_loss_func, which is top_k times it, as a second reference) and the ST-MoE router z-loss."""

from __future__ import annotations

import pytest
import torch
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

from zoo.modules.moe import BALANCES, MoESettings, Routing


def _routing(logits: torch.Tensor, k: int) -> tuple[Routing, torch.Tensor]:
    probs = logits.softmax(-1)
    weights, experts = probs.topk(k, dim=-1)
    load = torch.bincount(experts.reshape(-1), minlength=logits.shape[1])
    return Routing(experts, weights, probs, logits), load


def test_aux_loss_by_hand():
    # two tokens, two experts, top-1: both go to expert 0 -> f = (1, 0)
    logits = torch.log(torch.tensor([[0.75, 0.25], [0.5, 0.5 - 1e-6]]))
    routing, load = _routing(logits, 1)
    assert load.tolist() == [2, 0]
    settings = MoESettings(n_experts=2, top_k=1, aux_coef=0.1)
    loss = BALANCES.get("aux").loss(routing, load, settings)
    p0 = (0.75 + 0.5) / 2  # P_0
    assert float(loss) == pytest.approx(0.1 * 2 * (1.0 * p0 + 0.0), abs=1e-6)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_aux_loss_is_transformers_over_top_k(k):
    logits = torch.randn(20, 6)
    routing, load = _routing(logits, k)
    ours = BALANCES.get("aux").loss(routing, load, MoESettings(n_experts=6, top_k=k, aux_coef=1.0))
    theirs = load_balancing_loss_func((logits,), num_experts=6, top_k=k)
    assert float(ours) == pytest.approx(float(theirs) / k, rel=1e-5)


def test_z_loss_by_hand():
    logits = torch.tensor([[0.0, 0.0], [1.0, 2.0]])
    routing, load = _routing(logits, 1)
    lse = [torch.log(torch.tensor(2.0)), torch.log(torch.tensor(1.0).exp() + torch.tensor(2.0).exp())]
    expected = 0.01 * (lse[0] ** 2 + lse[1] ** 2) / 2
    loss = BALANCES.get("z").loss(routing, load, MoESettings(n_experts=2, top_k=1, z_coef=0.01))
    assert float(loss) == pytest.approx(float(expected), rel=1e-6)


def test_none_adds_nothing_and_aux_has_a_gradient_through_the_probabilities():
    logits = torch.randn(5, 4, requires_grad=True)
    routing, load = _routing(logits, 2)
    assert BALANCES.get("none").loss(routing, load, MoESettings(n_experts=4)) is None
    BALANCES.get("aux").loss(routing, load, MoESettings(n_experts=4)).backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0
