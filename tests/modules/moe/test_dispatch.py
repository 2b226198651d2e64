"""Dispatch against a per-token loop written by hand: dropless, and under a capacity the exact assignments
GShard's priority keeps (every first choice before any second choice, earlier tokens first)."""

from __future__ import annotations

import torch
from torch import nn

from zoo.modules.moe import Routing, capacity, dispatch


class _Scale(nn.Module):
    """Expert i multiplies by (i + 1): which expert touched a token can be read off its output."""

    def __init__(self, i: int) -> None:
        super().__init__()
        self.factor = nn.Parameter(torch.tensor(float(i + 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.factor * x


def _loop(x, experts, weights, kept):
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for c in range(experts.shape[1]):
            if kept[t][c]:
                out[t] += weights[t, c] * (experts[t, c] + 1) * x[t]
    return out


def _routing(experts: list[list[int]]) -> Routing:
    e = torch.tensor(experts)
    w = torch.rand(e.shape)
    return Routing(e, w, torch.full((e.shape[0], 3), 1 / 3), torch.zeros(e.shape[0], 3))


def test_dropless_equals_the_per_token_loop():
    x = torch.randn(6, 4)
    routing = _routing([[0, 1], [1, 2], [0, 2], [2, 0], [1, 0], [0, 1]])
    done = dispatch(x, routing, nn.ModuleList(_Scale(i) for i in range(3)))
    expected = _loop(x, routing.experts, routing.weights, [[True, True]] * 6)
    assert torch.allclose(done.out, expected, atol=1e-6)
    assert done.load.tolist() == [5, 4, 3] and int(done.dropped) == 0


def test_capacity_drops_exactly_what_the_priority_rule_says():
    # 6 tokens, top-2, 3 experts, factor 0.5: capacity = ceil(0.5 * 6 * 2 / 3) = 2 per expert
    assert capacity(6, 2, 3, 0.5) == 2
    choices = [[0, 1], [1, 2], [0, 2], [2, 0], [1, 0], [0, 1]]
    # first choices in token order: t0->0, t1->1, t2->0, t3->2, t4->1, t5->0 (expert 0 full after t2: t5's
    # first choice dropped); then second choices: t0->1 (expert 1 full: dropped), t1->2 (kept, 2 now full),
    # t2->2 dropped, t3->0 dropped, t4->0 dropped, t5->1 dropped
    kept = [[True, False], [True, True], [True, False], [True, False], [True, False], [False, False]]
    x = torch.randn(6, 4)
    routing = _routing(choices)
    done = dispatch(x, routing, nn.ModuleList(_Scale(i) for i in range(3)), capacity_factor=0.5)
    assert torch.allclose(done.out, _loop(x, routing.experts, routing.weights, kept), atol=1e-6)
    assert int(done.dropped) == 12 - sum(map(sum, kept)) == 6
    assert done.load.tolist() == [5, 4, 3]  # the load counts what the router asked for, before the drop


def test_every_expert_gets_a_gradient_even_without_tokens():
    experts = nn.ModuleList(_Scale(i) for i in range(3))
    x = torch.randn(2, 4, requires_grad=True)
    dispatch(x, _routing([[0, 1], [1, 0]]), experts).out.sum().backward()
    assert all(e.factor.grad is not None for e in experts)  # expert 2 took nothing: zero, not None
    assert float(experts[2].factor.grad) == 0.0
