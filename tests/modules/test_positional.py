"""Positional schemes against their closed forms."""

import math

import pytest
import torch

from zoo.config import ModelConfig
from zoo.modules.positional import ALiBi, Rotary, Sinusoidal, alibi_slopes


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_sinusoidal_matches_paper_formula(layout):
    d, positions = 8, 12
    pe = Sinusoidal(ModelConfig(d_model=d, n_heads=2, positional={"name": "sinusoidal", "layout": layout}))
    table = pe.encoding(torch.arange(positions)[None])[0]
    for pos in range(positions):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            sin_at, cos_at = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, d // 2 + i)
            assert table[pos, sin_at].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert table[pos, cos_at].item() == pytest.approx(math.cos(angle), abs=1e-5)


def _rotate(rope: Rotary, x: torch.Tensor, pos: int) -> torch.Tensor:
    terms = rope.terms(torch.tensor([[pos]]), pos, pos + 1, causal=False)
    return terms.rotate(x.view(1, 1, 1, -1)).view(-1)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_dot_product_depends_only_on_offset(layout):
    rope = Rotary(ModelConfig(d_model=16, n_heads=2, positional={"name": "rope", "layout": layout}))
    q, k = torch.randn(8), torch.randn(8)
    for m, n in [(3, 1), (10, 2), (7, 7)]:
        base = _rotate(rope, q, m) @ _rotate(rope, k, n)
        for shift in (1, 5, 40):
            assert torch.allclose(_rotate(rope, q, m + shift) @ _rotate(rope, k, n + shift), base, atol=1e-4)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_equals_complex_rotation(layout):
    """RoPE multiplies each feature pair (a + ib) by e^{i pos theta_j}, theta_j = base^(-2j/D)."""
    d, pos, base = 8, 5, 10000.0
    rope = Rotary(ModelConfig(d_model=16, n_heads=2,
                              positional={"name": "rope", "layout": layout, "base": base}))
    x = torch.randn(d)
    pairs = (torch.arange(d // 2), torch.arange(d // 2) + d // 2) if layout == "half" else (
        torch.arange(0, d, 2), torch.arange(1, d, 2))
    z = torch.complex(x[pairs[0]], x[pairs[1]])
    theta = base ** (-torch.arange(0, d, 2).float() / d)
    rotated = z * torch.exp(1j * pos * theta)
    expected = torch.empty(d)
    expected[pairs[0]], expected[pairs[1]] = rotated.real, rotated.imag
    assert torch.allclose(_rotate(rope, x, pos), expected, atol=1e-5)


def test_alibi_slopes_and_bias():
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert torch.allclose(alibi_slopes(4), torch.tensor([2.0 ** (-2 * (i + 1)) for i in range(4)]))
    alibi = ALiBi(ModelConfig(d_model=16, n_heads=4, positional="alibi"))
    # queries at 3, 4; keys 0..4
    bias = alibi.terms(torch.zeros(1, 2, dtype=torch.long), 3, 5, causal=True).bias
    assert bias.shape == (1, 4, 2, 5)
    assert bias[0, 0, 0].tolist() == pytest.approx([-0.75, -0.5, -0.25, 0.0, -0.25])


def _press_slopes(n: int) -> list[float]:
    """get_slopes from the ALiBi authors' reference code (ofirpress/attention_with_linear_biases)."""

    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _press_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("n_heads", [1, 2, 3, 5, 6, 8, 12, 16])
def test_alibi_slopes_match_reference_code_for_any_head_count(n_heads):
    assert alibi_slopes(n_heads).tolist() == pytest.approx(_press_slopes(n_heads), rel=1e-6)


def test_nope_layers_skip_the_rotation():
    """layer_pattern [rope, rope, rope, nope]: layers 3, 7, ... get no rotary terms (SmolLM3's pattern); with
    [nope] no layer rotates, so the model is exactly the same weights with positional=none."""
    import zoo

    smollm3 = ModelConfig(positional="rope", layer_pattern=["rope", "rope", "rope", "nope"])
    assert [smollm3.layer_rotates(i) for i in range(8)] == [True, True, True, False] * 2
    kw = dict(arch="decoder", vocab_size=32, d_model=16, n_heads=2, n_layers=2, norm="rmsnorm")
    torch.manual_seed(0)
    nope = zoo.build({**kw, "positional": "rope", "layer_pattern": ["nope"]}).eval()
    plain = zoo.build({**kw, "positional": "none"}).eval()
    plain.load_state_dict(nope.state_dict())
    rope = zoo.build({**kw, "positional": "rope"}).eval()
    rope.load_state_dict(nope.state_dict())
    ids = torch.randint(0, 32, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(nope(ids).logits, plain(ids).logits)
        assert not torch.allclose(nope(ids).logits, rope(ids).logits)
    with pytest.raises(ValueError, match=r"model.layer_pattern=\['rope', 'nope'\] tags layers 'nope', which "
                                         r"needs a rotary scheme \(model.positional=learned does not rotate"):
        zoo.build({**kw, "positional": "learned"}, layer_pattern=["rope", "nope"])
