"""The balancing losses on a worked example: Switch/GShard's n_experts * sum_i f_i * P_i (with transformers'
load_balancing_loss_func, which is top_k times it, as a second reference) and the ST-MoE router z-loss."""

from __future__ import annotations

import pytest
import torch
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

from zoo.config import ModelConfig
from zoo.modules.moe import BALANCES, MoE, Routing


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
    loss = BALANCES.get("aux")(routing, load)
    p0 = (0.75 + 0.5) / 2  # P_0
    assert float(loss) == pytest.approx(2 * (1.0 * p0 + 0.0), abs=1e-6)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_aux_loss_is_transformers_over_top_k(k):
    logits = torch.randn(20, 6)
    routing, load = _routing(logits, k)
    ours = BALANCES.get("aux")(routing, load)
    theirs = load_balancing_loss_func((logits,), num_experts=6, top_k=k)
    assert float(ours) == pytest.approx(float(theirs) / k, rel=1e-5)


def test_z_loss_by_hand():
    logits = torch.tensor([[0.0, 0.0], [1.0, 2.0]])
    routing, load = _routing(logits, 1)
    lse = [torch.log(torch.tensor(2.0)), torch.log(torch.tensor(1.0).exp() + torch.tensor(2.0).exp())]
    expected = (lse[0] ** 2 + lse[1] ** 2) / 2
    loss = BALANCES.get("z")(routing, load)
    assert float(loss) == pytest.approx(float(expected), rel=1e-6)


def test_aux_has_a_gradient_through_the_probabilities():
    logits = torch.randn(5, 4, requires_grad=True)
    routing, load = _routing(logits, 2)
    BALANCES.get("aux")(routing, load).backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


@pytest.mark.parametrize("balance", [{}, {"aux": 0.1}, {"aux": 0.1, "z": 0.01}])
def test_the_layer_adds_each_named_loss_times_its_coefficient_and_nothing_else(balance):
    """model.ffn.balance: loss name -> coefficient; {} adds no loss (the sigmoid_bias router's choice)."""
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=8, n_heads=2, d_ff=12, ffn={"name": "moe", "n_experts": 4, "balance": balance})
    layer = MoE(cfg, cfg.ffn)
    x = torch.randn(2, 5, 8)
    layer(x)
    routing = layer.router(x.reshape(-1, 8))
    want = {"aux": BALANCES.get("aux"), "z": BALANCES.get("z")}
    assert set(layer.last.losses) == set(balance)
    for name, coef in balance.items():
        expected = coef * want[name](routing, layer.last.load)
        torch.testing.assert_close(layer.last.losses[name], expected)
