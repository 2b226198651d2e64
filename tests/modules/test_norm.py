"""Norms against transformers' own modules: RMSNorm vs LlamaRMSNorm, the (1 + w) RMSNorm vs GemmaRMSNorm
(float32 and bfloat16, where the order of the cast matters), and the zero-initialised gain of a built
model."""

from __future__ import annotations

import pytest
import torch
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

import zoo
from zoo.inspection.counts import parameter_counts
from zoo.modules.norm import NORMS, OnePlusRMSNorm, RMSNorm, norm_module_types


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("name", "reference"), [("rmsnorm", LlamaRMSNorm), ("rmsnorm_1p", GemmaRMSNorm)])
def test_rms_norms_match_transformers(name, reference, dtype):
    dim, eps = 24, 1e-6
    ours, ref = NORMS.get(name)(dim, eps, False), reference(dim, eps=eps)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(dim, generator=gen) * 0.5)
        ours.weight.copy_(ref.weight)
    ours, ref = ours.to(dtype), ref.to(dtype)
    x = (torch.randn(3, 5, dim, generator=gen) * 3).to(dtype)
    got, expected = ours(x), ref(x)
    assert got.dtype == expected.dtype == dtype
    assert torch.equal(got, expected)


def test_one_plus_gain_closed_form():
    norm = OnePlusRMSNorm(4, eps=0.0)
    x = torch.tensor([[1.0, -2.0, 3.0, -4.0]])
    rms = (x.pow(2).mean()).sqrt()
    assert torch.equal(norm.weight, torch.zeros(4))  # gain 1 at construction
    assert torch.allclose(norm(x), x / rms)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([0.0, 1.0, -1.0, 0.5]))
    assert torch.allclose(norm(x), x / rms * torch.tensor([1.0, 2.0, 0.0, 1.5]))


def test_built_model_keeps_the_zero_gain_and_counts_it_as_a_norm():
    """init_weights draws only Linear/Embedding weights: a (1 + w) gain stays 0 (gain 1), not N(0, std)."""
    model = zoo.build(dict(arch="decoder", vocab_size=32, d_model=16, n_heads=2, n_layers=2,
                           norm="rmsnorm_1p", embed_norm=True))
    norms = [m for m in model.modules() if isinstance(m, OnePlusRMSNorm)]
    assert len(norms) == 2 * 2 + 1 + 1  # two per layer (pre wiring), the final norm, the embedding norm
    assert all(torch.equal(m.weight, torch.zeros(16)) for m in norms)
    assert OnePlusRMSNorm in norm_module_types() and RMSNorm in norm_module_types()
    assert parameter_counts(model)["norms"] == len(norms) * 16  # the parameter table files them under norms
