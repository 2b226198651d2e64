"""Weight init against its closed form: GPT-2's residual scaling, N(0, init_std / sqrt(2 * depth)) for each
stack's residual output projections (attention `o`, feed-forward `down`), counted over the layers the stack
has (HF GPT2: c_proj std = initializer_range / sqrt(2 * n_layer)); everything else N(0, init_std)."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.presets import build

STD = 0.02


def measured_std(model, suffix: str, under: str = "") -> float:
    """Pooled std of every parameter under `under` whose name ends with `suffix` (>= 65k samples: ~0.3%
    noise)."""
    params = [p.detach().flatten() for n, p in model.named_parameters()
              if n.startswith(under) and n.endswith(suffix)]
    assert params, (suffix, under)
    return float(torch.cat(params).std())


@pytest.mark.parametrize("n_layers", [1, 3])
def test_decoder_residual_projections_scale_by_its_depth(n_layers):
    model = build("gpt_nano", d_model=256, d_ff=1024, n_heads=4, n_layers=n_layers, vocab_size=64)
    expected = STD / math.sqrt(2 * n_layers)  # not 4 * n_layers: a decoder has one stack of n_layers
    assert measured_std(model, "self_attn.o.weight") == pytest.approx(expected, rel=0.02)
    assert measured_std(model, "ffn.down.weight") == pytest.approx(expected, rel=0.02)
    assert measured_std(model, "ffn.up.weight") == pytest.approx(STD, rel=0.02)  # not a residual output


def test_encoder_decoder_stacks_scale_by_their_own_depth():
    model = build("transformer_tiny", d_model=256, d_ff=1024, encoder_layers=1, decoder_layers=4,
                  vocab_size=64)
    assert measured_std(model, "o.weight", "encoder_stack") == pytest.approx(STD / math.sqrt(2), rel=0.02)
    assert measured_std(model, "o.weight", "decoder_stack") == pytest.approx(STD / math.sqrt(8), rel=0.02)
    assert measured_std(model, "down.weight", "decoder_stack") == pytest.approx(STD / math.sqrt(8), rel=0.02)
