"""zoo.quantize(model, "int8"): the int8 layer against a hand-worked example and a plain dequantised
matmul, the stated error bound of per-channel rounding, and a quantised model's logits against fp32."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import zoo
from zoo.quantization import Int8Linear


def test_int8_linear_hand_worked():
    """Row [1, -2, 0.5]: scale 2/127, q = round(w / scale) = [64, -127, 32]; y = x . (q * scale) + b."""
    lin = nn.Linear(3, 1)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, -2.0, 0.5]]))
        lin.bias.fill_(0.25)
    q = Int8Linear(lin)
    assert q.weight_int8.tolist() == [[64, -127, 32]]
    torch.testing.assert_close(q.scales, torch.tensor([2.0 / 127]))
    x = torch.tensor([[1.0, 1.0, 2.0]])
    expected = (64 - 127 + 2 * 32) * 2.0 / 127 + 0.25
    torch.testing.assert_close(q(x), torch.tensor([[expected]]))


def test_int8_linear_matches_dequantised_matmul_within_rounding_bound():
    torch.manual_seed(0)
    lin = nn.Linear(48, 40)
    q = Int8Linear(lin)
    dequant = q.weight_int8.float() * q.scales[:, None]  # (N, K)
    # rounding to the nearest step: every weight is within half a step of its row's scale
    assert bool(((dequant - lin.weight).abs() <= q.scales[:, None] / 2 + 1e-7).all())
    x = torch.randn(2, 5, 48)  # (B, T, K): leading dims pass through
    with torch.no_grad():
        # many rows: scaled outputs
        torch.testing.assert_close(q(x), x @ dequant.T + lin.bias, atol=1e-5, rtol=1e-5)
        one = x[:1, :1]  # one row (a decode step): the fused int8 kernel
        torch.testing.assert_close(q(one), one @ dequant.T + lin.bias, atol=1e-5, rtol=1e-5)


def test_quantized_model_logits_close_to_fp32():
    """Stated tolerance: relative L2 error of the logits below 2% and the same top-1 token at >= 95% of
    positions (int8 with per-channel scales perturbs each weight by at most half a step, ~0.4% of a row's
    max)."""
    torch.manual_seed(0)
    model = zoo.build(dict(arch="decoder", vocab_size=200, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                           activation="swiglu", norm="rmsnorm", positional="rope", dropout=0.0)).eval()
    quantized = zoo.quantize(copy.deepcopy(model), "int8")
    assert not any(type(m) is nn.Linear for m in quantized.modules())
    ids = torch.randint(0, 200, (3, 24))
    with torch.no_grad():
        ref, out = model(ids).logits, quantized(ids).logits
    assert float((out - ref).norm() / ref.norm()) < 0.02
    assert float((out.argmax(-1) == ref.argmax(-1)).float().mean()) >= 0.95


def test_quantize_bad_input():
    with pytest.raises(ValueError, match="Unknown quantization method 'int4'.* Allowed: int8"):
        zoo.quantize(nn.Linear(2, 2), "int4")
    with pytest.raises(ValueError, match="found no nn.Linear layer"):
        zoo.quantize(nn.Sequential(nn.ReLU()), "int8")


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_int8_model_exports_its_dequantised_weights_for_transformers(tmp_path, tied):
    """save_pretrained(quantize(model)) writes each int8 layer's q * scale (the float weight it computes
    with); transformers' logits equal the int8 model's. A tied pair has one table in the file: the float
    embedding (quantize keeps it float and gives the head an int8 copy), so there the reference keeps the
    float head."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = zoo.build("llama_small", vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48,
                      tie_embeddings=tied).eval()
    quantized = zoo.quantize(copy.deepcopy(model), "int8")
    hf = LlamaForCausalLM.from_pretrained(zoo.save_pretrained(quantized, tmp_path / "int8")).eval()
    reference = copy.deepcopy(quantized)
    if tied:
        reference.head.proj = model.head.proj  # the float table, shared with the (float) embedding
    ids = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        got, ref, fp32 = hf(input_ids=ids).logits, reference(ids).logits, model(ids).logits
    assert (got - ref).abs().max() < 1e-4
    # beyond that tolerance: the int8 rounding is in the file, not fp32
    assert (got - fp32).abs().max() > 1e-4
