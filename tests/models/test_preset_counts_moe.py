"""The Mixture-of-Experts presets (Mixtral 8x7B, OLMoE-1B-7B, Qwen3-30B-A3B) have the parameter count of the
`transformers` model with the same published config values (both built on the meta device), and the total and
active counts of their model cards."""

import math

import pytest
import torch
from transformers import (
    MixtralConfig,
    MixtralForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

import zoo
from zoo.inspection import parameter_counts

PRESETS = {  # preset -> (transformers classes, the model's config.json values), from the model cards
    "mixtral_8x7b": (MixtralConfig, MixtralForCausalLM, dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
        tie_word_embeddings=False)),
    "olmoe_1b_7b": (OlmoeConfig, OlmoeForCausalLM, dict(
        vocab_size=50304, hidden_size=2048, intermediate_size=1024, num_hidden_layers=16,
        num_attention_heads=16, num_key_value_heads=16, num_experts=64, num_experts_per_tok=8,
        tie_word_embeddings=False)),
    "qwen3_30b_a3b": (Qwen3MoeConfig, Qwen3MoeForCausalLM, dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, moe_intermediate_size=768,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, tie_word_embeddings=False)),
}
# the model cards' total and active counts, in billions to one decimal; a card rounds (Mixtral, OLMoE) or cuts
# (Qwen3-30B-A3B: 3,353,032,704 active are "3.3B activated"), so a count is within 0.1B of its card's figure
# (the card's figure is its rounded or its cut value)
PUBLISHED = {"mixtral_8x7b": ("46.7", "12.9"), "olmoe_1b_7b": ("6.9", "1.3"),
             "qwen3_30b_a3b": ("30.5", "3.3")}
SLOW = {"qwen3_30b_a3b"}  # 6,144 experts: each side takes seconds to build even on the meta device


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.e2e) if n in SLOW else n
                                  for n in sorted(PRESETS)])
def test_moe_preset_counts_equal_transformers_and_the_model_card(name):
    config_class, model_class, values = PRESETS[name]
    with torch.device("meta"):
        hf = model_class(config_class(**values))
        ours = zoo.build(name)
    counts = parameter_counts(ours)
    assert counts["total"] == ours.num_parameters() == sum(p.numel() for p in hf.parameters())
    for key, card in zip(("total", "active"), PUBLISHED[name], strict=True):
        billions = counts[key] / 1e9
        assert card in (f"{billions:.1f}", f"{math.floor(billions * 10) / 10:.1f}"), (key, billions, card)
