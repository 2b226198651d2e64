"""The pythia_70m and opt_125m presets have the parameter count of the `transformers` model with the same
shape (both built on the meta device: no memory, no init), which is the published one."""

from __future__ import annotations

import pytest
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, OPTConfig, OPTForCausalLM

import zoo


def _pythia_70m():
    return GPTNeoXForCausalLM(GPTNeoXConfig(
        hidden_size=512, num_hidden_layers=6, num_attention_heads=8, intermediate_size=2048, vocab_size=50304,
        rotary_pct=0.25, rotary_emb_base=10000, max_position_embeddings=2048, use_parallel_residual=True,
        tie_word_embeddings=False))


def _opt_125m():
    return OPTForCausalLM(OPTConfig(
        hidden_size=768, num_hidden_layers=12, num_attention_heads=12, ffn_dim=3072, vocab_size=50272,
        max_position_embeddings=2048, do_layer_norm_before=True, activation_function="relu",
        tie_word_embeddings=True))


@pytest.mark.parametrize(("preset", "reference", "published"), [
    ("pythia_70m", _pythia_70m, 70_426_624),
    ("opt_125m", _opt_125m, 125_239_296),
])
def test_preset_count_equals_transformers(preset, reference, published):
    with torch.device("meta"):
        model, hf = zoo.build(preset), reference()
    hf_count = sum(p.numel() for p in hf.parameters())  # parameters() lists a tied head once
    assert model.num_parameters() == hf_count == published
