"""The gated tanh-GELU FFN (geglu_tanh, Gemma) against transformers' GemmaMLP with the same weights and a
hand-written formula; the ungated form the heads use."""

from __future__ import annotations

import math

import torch
from transformers import GemmaConfig
from transformers.models.gemma.modeling_gemma import GemmaMLP

from zoo.config import ModelConfig
from zoo.modules.feedforward import ACTIVATIONS, FeedForward, plain_activation


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel), written out."""
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def test_geglu_tanh_matches_gemma_mlp():
    d, hidden = 16, 24
    hf = GemmaMLP(GemmaConfig(hidden_size=d, intermediate_size=hidden, hidden_act="gelu_pytorch_tanh"))
    ffn = FeedForward(ModelConfig(d_model=d, n_heads=2, d_ff=hidden, activation="geglu_tanh", bias=False))
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.3)
        ffn.up.weight.copy_(torch.cat([hf.gate_proj.weight, hf.up_proj.weight]))  # rows [gate | value]
        ffn.down.weight.copy_(hf.down_proj.weight)
    x = torch.randn(2, 5, d)
    with torch.no_grad():
        got, expected = ffn(x), hf(x)
        by_hand = ffn.down(_gelu_tanh(x @ hf.gate_proj.weight.T) * (x @ hf.up_proj.weight.T))
    assert torch.allclose(got, expected, atol=1e-6)
    assert torch.allclose(got, by_hand, atol=1e-5)


def test_geglu_tanh_is_gated_and_its_plain_form_is_gelu_tanh():
    act = ACTIVATIONS.get("geglu_tanh")
    assert act.gated and plain_activation("geglu_tanh") is ACTIVATIONS.get("gelu_tanh")
    x = torch.linspace(-6, 6, 101)
    assert torch.allclose(act.fn(x), _gelu_tanh(x), atol=1e-6)
    # the approximation, not exact GELU
    assert not torch.allclose(act.fn(x), torch.nn.functional.gelu(x), atol=1e-4)
