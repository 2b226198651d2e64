"""Attention against hand-worked numbers and against its own explicit (weights) path."""

import math

import pytest
import torch

from zoo.config import ModelConfig
from zoo.modules.attention import Attention
from zoo.modules.mask import build_mask


def _identity_cross_attention() -> Attention:
    cfg = ModelConfig(d_model=2, n_heads=1, bias=False, vocab_size=8)
    attn = Attention(cfg, cross=True).eval()
    eye = torch.eye(2)
    with torch.no_grad():
        attn.q.weight.copy_(eye)
        attn.kv.weight.copy_(torch.cat([eye, eye]))  # k = v = memory
        attn.o.weight.copy_(eye)
    return attn


@pytest.mark.parametrize("need_weights", [False, True])
def test_hand_worked_example(need_weights):
    """q=[1,0], keys [1,0],[0,1],[1,1], values = keys, D=2: scores [1,0,1]/sqrt(2)."""
    attn = _identity_cross_attention()
    query = torch.tensor([[[1.0, 0.0]]])
    keys = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    mask = build_mask(None, causal=False, q_len=1, k_len=3)
    out, weights = attn(query, mask, memory=keys, need_weights=need_weights)
    e = math.exp(1 / math.sqrt(2))
    expected_w = torch.tensor([e, 1.0, e]) / (2 * e + 1)
    assert torch.allclose(expected_w, torch.tensor([0.401, 0.198, 0.401]), atol=1e-3)
    assert torch.allclose(out[0, 0], torch.tensor([0.802, 0.599]), atol=1e-3)
    assert torch.allclose(out[0, 0], expected_w @ keys[0], atol=1e-6)
    if need_weights:
        assert torch.allclose(weights[0, 0, 0], expected_w, atol=1e-6)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize("causal", [True, False])
def test_fast_path_matches_weights_path_with_padding(kv_heads, causal):
    cfg = ModelConfig(d_model=32, n_heads=4, n_kv_heads=kv_heads, vocab_size=8)
    attn = Attention(cfg).eval()
    x = torch.randn(3, 7, 32)
    key_mask = torch.ones(3, 7, dtype=torch.long)
    key_mask[1, 5:] = 0
    key_mask[2, :3] = 0  # left padding: for causal, query rows 0..2 see no key at all
    mask = build_mask(key_mask, causal=causal, q_len=7, k_len=7)
    fast, _ = attn(x, mask)
    slow, weights = attn(x, mask, need_weights=True)
    assert torch.isfinite(fast).all() and torch.isfinite(slow).all()
    assert torch.allclose(fast, slow, atol=1e-5)
    visible = mask.mask.expand_as(weights)
    assert (weights[~visible] == 0).all()  # masked keys get exactly zero weight
    sums = weights.sum(-1)
    rows_with_keys = visible.any(-1)
    assert torch.allclose(sums[rows_with_keys], torch.ones_like(sums[rows_with_keys]), atol=1e-6)
    assert (sums[~rows_with_keys] == 0).all()  # a row whose keys are all masked yields zeros, never NaN


def test_all_masked_query_rows_output_zero():
    cfg = ModelConfig(d_model=16, n_heads=2, vocab_size=8, bias=False)
    attn = Attention(cfg).eval()
    key_mask = torch.tensor([[0, 0, 1, 1]])
    mask = build_mask(key_mask, causal=True, q_len=4, k_len=4)
    out, _ = attn(torch.randn(1, 4, 16), mask)
    assert torch.equal(out[0, :2], torch.zeros(2, 16))  # rows 0, 1 see only pads; no bias -> exact 0
    assert out[0, 2:].abs().sum() > 0


def test_scores_are_scaled_by_inverse_sqrt_head_dim():
    cfg = ModelConfig(d_model=8, n_heads=2, vocab_size=8, bias=False)
    attn = Attention(cfg).eval()
    seen = {}
    attn.tap = lambda name, t: seen.__setitem__(name, t)
    x = torch.randn(1, 5, 8)
    attn(x, build_mask(None, causal=True, q_len=5, k_len=5))
    q, k = seen["q"], seen["k"]
    raw = q @ k.transpose(-2, -1) / math.sqrt(4)
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    assert torch.allclose(seen["scores"][..., ~future], raw[..., ~future], atol=1e-6)
    assert torch.isneginf(seen["scores"][..., future]).all()
    assert torch.allclose(seen["weights"], raw.masked_fill(future, float("-inf")).softmax(-1), atol=1e-6)
    assert seen["heads_concat"].shape == (1, 5, 8)


@pytest.mark.parametrize("need_weights", [False, True])
def test_all_masked_rows_with_a_score_bias_give_finite_gradients(need_weights):
    """ALiBi's float bias carries -inf for masked keys; left-padding rows that see no key must give zero
    output and finite gradients on the weights path too (softmax of an all -inf row is NaN, also backward)."""
    from zoo.modules.positional import alibi_slopes

    cfg = ModelConfig(d_model=16, n_heads=2, vocab_size=8, positional="alibi")
    attn = Attention(cfg)
    distance = (torch.arange(4)[:, None] - torch.arange(4)[None]).abs().float()
    bias = (-alibi_slopes(2)[:, None, None] * distance)[None]  # (1, H, 4, 4)
    mask = build_mask(torch.tensor([[0, 0, 1, 1]]), causal=True, q_len=4, k_len=4, bias=bias)
    x = torch.randn(1, 4, 16, requires_grad=True)
    out, _ = attn(x, mask, need_weights=need_weights)
    assert torch.equal(out[0, :2], attn.o.bias.expand(2, 16))  # rows 0, 1 see only pads: zero heads
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in attn.parameters())
