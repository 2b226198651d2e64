"""Attention sinks (zoo.modules.sinks, `mixer.sinks`) against hand-worked numbers, and the SDPA path against
the explicit one (GQA, padding, sliding window, cache); swiglu_clamped (zoo.modules.clamped_glu) against its
closed form."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.config import ModelConfig
from zoo.modules.attention import Attention
from zoo.modules.cache import LayerCache
from zoo.modules.clamped_glu import clamped_swiglu
from zoo.modules.feedforward import ACTIVATIONS, FeedForward
from zoo.modules.mask import AttentionMask, build_mask
from zoo.modules.sinks import sdpa_with_sinks, softmax_with_sinks


def test_a_sink_takes_its_share_of_the_denominator():
    """Scores 0 and ln 2, sink ln 3: weights e^0 / 6 and e^ln2 / 6 (the sink's 3/6 dropped); values 1 and 4
    give 1/6 + 8/6 = 1.5; causal, the first query sees key 0 and the sink only: 1 / (1 + 3) = 0.25."""
    scores = torch.tensor([0.0, math.log(2)]).view(1, 1, 1, 2)
    weights = softmax_with_sinks(scores, torch.tensor([math.log(3)]))
    assert torch.allclose(weights.flatten(), torch.tensor([1 / 6, 2 / 6]))
    q = torch.ones(1, 1, 2, 1)  # scale 1: q.k is the key's value
    k = torch.tensor([0.0, math.log(2)]).view(1, 1, 2, 1)
    v = torch.tensor([1.0, 4.0]).view(1, 1, 2, 1)
    sinks = torch.tensor([math.log(3)])
    out = sdpa_with_sinks(q, k, v, AttentionMask(is_causal=True), sinks, scale=1.0, dropout=0.0)
    assert torch.allclose(out.flatten(), torch.tensor([0.25, 1.5]))


def test_a_very_negative_sink_is_plain_attention():
    cfg = ModelConfig(d_model=16, n_heads=2, mixer={"sinks": True})
    sunk, plain = Attention(cfg), Attention(ModelConfig(d_model=16, n_heads=2))
    plain.load_state_dict({k: v for k, v in sunk.state_dict().items() if k != "sinks"})
    with torch.no_grad():
        sunk.sinks.fill_(-1e4)
    x = torch.randn(2, 5, 16)
    mask = AttentionMask(is_causal=True)
    assert torch.allclose(sunk(x, mask)[0], plain(x, mask)[0], atol=1e-6)


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("padded", [False, True])
def test_sdpa_path_equals_the_explicit_path(window, padded):
    """GQA (4 heads, 2 KV heads), left padding, a sliding window, a prefill then one cached step."""
    torch.manual_seed(0)
    attn = Attention(ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, mixer={"sinks": True})).eval()
    with torch.no_grad():
        attn.sinks.normal_()
    x = torch.randn(2, 7, 32)
    keys = torch.tensor([[1] * 7, [0, 0, 1, 1, 1, 1, 1]]) if padded else None
    mask = build_mask(keys, causal=True, q_len=7, k_len=7, window=window).for_layer(window is not None)
    fast, _ = attn(x, mask)
    slow, weights = attn(x, mask, need_weights=True)
    assert (fast - slow).abs().max() < 1e-5
    assert bool((weights.sum(-1) < 1).all())  # the sink keeps a share of every row
    new = torch.randn(2, 1, 32)
    step_keys = None if keys is None else torch.cat([keys, torch.ones(2, 1, dtype=keys.dtype)], 1)
    step_mask = build_mask(step_keys, causal=True, q_len=1, k_len=8, window=window).for_layer(
        window is not None)
    full_mask = build_mask(step_keys, causal=True, q_len=8, k_len=8, window=window).for_layer(
        window is not None)
    whole = attn(torch.cat([x, new], 1), full_mask)[0][:, -1:]  # the last position without a cache
    for need_weights in (False, True):
        cache = LayerCache()
        attn(x, mask, cache=cache)
        step, _ = attn(new, step_mask, cache=cache, need_weights=need_weights)
        assert (step - whole).abs().max() < 1e-5


def test_swiglu_clamped_closed_form_and_gradients():
    """(clamp(v, -7, 7) + 1) * min(g, 7) * sigmoid(1.702 * min(g, 7)) on numbers below, at and past the
    clamps; past them the gradient is zero."""
    def sigmoid(x: float) -> float:
        return 1 / (1 + math.exp(-x))
    gate = torch.tensor([-1.0, 0.0, 2.0, 10.0], requires_grad=True)
    value = torch.tensor([0.5, 3.0, -9.0, 8.0], requires_grad=True)
    want = [1.5 * -1 * sigmoid(-1.702), 0.0, -6 * 2 * sigmoid(3.404), 8 * 7 * sigmoid(11.914)]
    out = clamped_swiglu(gate, value)
    assert torch.allclose(out, torch.tensor(want), atol=1e-6)
    out.sum().backward()
    assert gate.grad[3] == 0 and value.grad[2] == 0 and value.grad[3] == 0 and gate.grad[2] != 0
    assert ACTIVATIONS.get("swiglu_clamped").gated


def test_feedforward_with_swiglu_clamped_splits_gate_then_value():
    ffn = FeedForward(ModelConfig(d_model=4, d_ff=3, activation="swiglu_clamped", bias=True))
    x = torch.randn(2, 4) * 5
    h = ffn.up(x)
    assert torch.allclose(ffn(x), ffn.down(clamped_swiglu(h[:, :3], h[:, 3:])))


def test_the_sink_gradient_is_the_same_in_both_paths():
    """d loss / d sinks through SDPA's extra feature equals the explicit path's (and is nonzero)."""
    torch.manual_seed(1)
    attn = Attention(ModelConfig(d_model=16, n_heads=4, n_kv_heads=2, mixer={"sinks": True}))
    x, probe = torch.randn(2, 6, 16), torch.randn(2, 6, 16)
    mask = build_mask(torch.tensor([[1] * 6, [0, 1, 1, 1, 1, 1]]), causal=True, q_len=6, k_len=6)
    grads = []
    for need_weights in (False, True):
        attn.zero_grad()
        (attn(x, mask, need_weights=need_weights)[0] * probe).sum().backward()
        grads.append(attn.sinks.grad.clone())
    assert (grads[0] - grads[1]).abs().max() < 1e-5 and bool(grads[0].abs().min() > 0)
