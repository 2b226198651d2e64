"""The Mixture-of-Experts presets (Mixtral 8x7B, OLMoE-1B-7B) have the parameter count of the
`transformers` model with the same published config values (both built on the meta device), and the total and
active counts of their model cards."""

import pytest
import torch
from transformers import MixtralConfig, MixtralForCausalLM, OlmoeConfig, OlmoeForCausalLM

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
}
# the model cards' total and active counts, in billions, as they round them
PUBLISHED = {"mixtral_8x7b": ("46.7", "12.9"), "olmoe_1b_7b": ("6.9", "1.3")}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_moe_preset_counts_equal_transformers_and_the_model_card(name):
    config_class, model_class, values = PRESETS[name]
    with torch.device("meta"):
        hf = model_class(config_class(**values))
        ours = zoo.build(name)
    counts = parameter_counts(ours)
    assert counts["total"] == ours.num_parameters() == sum(p.numel() for p in hf.parameters())
    assert (f"{counts['total'] / 1e9:.1f}", f"{counts['active'] / 1e9:.1f}") == PUBLISHED[name]
