"""Each router against a hand-written rule on a worked example; the sigmoid_bias update against
DeepSeek-V3's rule (Wang et al. 2024): b_i += gamma * sign(mean load - load_i)."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.modules.ffn_settings import FFN
from zoo.modules.moe import ROUTERS

# three tokens, four experts: logits written out so that the choices can be read off by eye
LOGITS = torch.tensor([[2.0, 0.0, 1.0, -1.0],
                       [0.0, 3.0, 0.0, 2.5],
                       [-1.0, -2.0, 0.5, 0.4]])


def _router(name: str, route_scale: float = 1.0, **keys) -> torch.nn.Module:
    settings = FFN.parse({"name": "moe", "n_experts": 4, "top_k": 2, "router": {"name": name, **keys},
                          "route_scale": route_scale})
    router = ROUTERS.get(name)(4, settings)
    with torch.no_grad():
        router.proj.weight.copy_(torch.eye(4))  # x = the logits themselves
    return router


def _softmax_row(row: list[float]) -> list[float]:
    e = [math.exp(v) for v in row]
    return [v / sum(e) for v in e]


def test_softmax_topk_keeps_the_two_largest_probabilities_unnormalised():
    out = _router("softmax_topk")(LOGITS)
    assert out.experts.tolist() == [[0, 2], [1, 3], [2, 3]]
    for t, (i, j) in enumerate(out.experts.tolist()):
        p = _softmax_row(LOGITS[t].tolist())
        assert out.weights[t].tolist() == pytest.approx([p[i], p[j]], abs=1e-6)
        assert out.probs[t].tolist() == pytest.approx(p, abs=1e-6)


@pytest.mark.parametrize("name", ["softmax_topk_norm", "topk_softmax"])
def test_normalised_routers_weigh_the_two_chosen_by_their_share(name):
    out = _router(name)(LOGITS)
    assert out.experts.tolist() == [[0, 2], [1, 3], [2, 3]]
    for t, (i, j) in enumerate(out.experts.tolist()):
        a, b = LOGITS[t, i].item(), LOGITS[t, j].item()
        expected = [1 / (1 + math.exp(b - a)), 1 / (1 + math.exp(a - b))]  # softmax over the two
        assert out.weights[t].tolist() == pytest.approx(expected, abs=1e-6)


def test_route_scale_multiplies_the_kept_weights():
    plain, scaled = _router("topk_softmax")(LOGITS), _router("topk_softmax", route_scale=2.5)(LOGITS)
    assert torch.allclose(scaled.weights, 2.5 * plain.weights)


def test_sigmoid_bias_chooses_with_the_bias_and_weighs_without_it():
    router = _router("sigmoid_bias")
    router.bias.copy_(torch.tensor([0.0, 0.0, 0.0, 10.0]))  # expert 3 is always chosen
    out = router(LOGITS)
    assert out.experts[:, 0].tolist() == [3, 3, 3]
    s = torch.sigmoid(LOGITS)
    assert out.experts[:, 1].tolist() == [0, 1, 2]  # the best of the rest, by score alone
    for t, (i, j) in enumerate(out.experts.tolist()):
        expected = [s[t, i] / (s[t, i] + s[t, j]), s[t, j] / (s[t, i] + s[t, j])]
        assert out.weights[t].tolist() == pytest.approx([float(v) for v in expected], abs=1e-6)
    assert torch.allclose(out.probs, s / s.sum(-1, keepdim=True))


def test_sigmoid_bias_update_follows_the_papers_rule():
    router = _router("sigmoid_bias", bias_rate=0.01)
    load = torch.tensor([6, 2, 2, 2])  # mean 3: expert 0 overloaded, the others under
    router.update(load)
    assert router.bias.tolist() == pytest.approx([-0.01, 0.01, 0.01, 0.01])
    router.update(torch.tensor([3, 3, 3, 3]))  # balanced: sign(0) = 0, no move
    assert router.bias.tolist() == pytest.approx([-0.01, 0.01, 0.01, 0.01])
    assert not router.bias.requires_grad and "bias" in dict(router.named_buffers())


def test_every_router_gives_k_distinct_experts_and_float32_probabilities():
    x = torch.randn(7, 4)
    for name in ROUTERS:
        out = _router(name)(x)
        assert out.experts.shape == (7, 2) and (out.experts[:, 0] != out.experts[:, 1]).all()
        assert out.probs.dtype == torch.float32 and torch.allclose(out.probs.sum(-1), torch.ones(7))
