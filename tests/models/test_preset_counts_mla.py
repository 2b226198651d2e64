"""The latent-attention presets (DeepSeek-V3, DeepSeek-V2-Lite) have the parameter count of the
`transformers` model with the same published config values (both built on the meta device, DeepSeek-V3's
without its multi-token-prediction layer, which transformers does not build), and the total and active counts
of their model cards: 671B / 37B and 15.7B / 2.4B, the active counts leaving out the token table (a lookup;
the unembedding is counted), each card's figure the count rounded or cut at its precision."""

import math

import pytest
import torch
from transformers import DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

import zoo
from zoo.inspection import parameter_counts

YARN = dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, original_max_position_embeddings=4096,
            beta_fast=32, beta_slow=1)
PRESETS = {  # preset -> (transformers classes, the model's config.json values, the card's total / active)
    "deepseek_v3_671b": (DeepseekV3Config, DeepseekV3ForCausalLM, dict(
        vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
        num_hidden_layers=61, num_attention_heads=128, n_routed_experts=256, n_shared_experts=1,
        num_experts_per_tok=8, n_group=8, topk_group=4, first_k_dense_replace=3, routed_scaling_factor=2.5,
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        max_position_embeddings=163840, rope_parameters=dict(YARN, mscale=1.0, mscale_all_dim=1.0)),
        ("671", "37")),
    "deepseek_v2_lite": (DeepseekV2Config, DeepseekV2ForCausalLM, dict(
        vocab_size=102400, hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
        num_hidden_layers=27, num_attention_heads=16, n_routed_experts=64, n_shared_experts=2,
        num_experts_per_tok=6, first_k_dense_replace=1, topk_method="greedy", q_lora_rank=None,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        max_position_embeddings=163840, rope_parameters=dict(YARN, mscale=0.707, mscale_all_dim=0.707)),
        ("15.7", "2.4")),
}
SLOW = {"deepseek_v3_671b"}  # 14,848 expert modules: seconds to build even on the meta device


def _card(count: int, card: str) -> bool:
    """Whether `card` is `count` in billions rounded or cut at the card's decimals."""
    decimals = len(card.partition(".")[2])
    billions = count / 1e9
    cut = math.floor(billions * 10**decimals) / 10**decimals
    return card in (f"{billions:.{decimals}f}", f"{cut:.{decimals}f}")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.e2e) if n in SLOW else n
                                  for n in sorted(PRESETS)])
def test_mla_preset_counts_equal_transformers_and_the_model_card(name):
    config_class, model_class, values, (total, active) = PRESETS[name]
    with torch.device("meta"):
        hf = model_class(config_class(**values))
        ours = zoo.build(name)
    counts = parameter_counts(ours)
    assert counts["total"] == ours.num_parameters() == sum(p.numel() for p in hf.parameters())
    assert _card(counts["total"], total), counts["total"]
    assert _card(counts["active"] - ours.embed.tokens.weight.numel(), active), counts["active"]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_mla_preset_is_what_the_family_reads_from_that_config(name):
    """The preset is the config zoo.from_pretrained reads from the same config.json values beside weights
    without an MTP layer, key for key (router, layer pattern, YaRN's mscale, the latent norms' eps), but the
    special token ids (the tokenizer's: a preset keeps zoo's defaults, which fit any vocabulary it is shrunk
    to)."""
    config_class, _, values, _ = PRESETS[name]
    hf = config_class(**values).to_dict()
    family = zoo.pretrained.FAMILIES.get(hf["model_type"])()
    # weights without the multi-token-prediction layer (config.json says num_nextn_predict_layers 1 anyway)
    read = family.fit_stored(family.config_from_hf(hf), ()).to_dict()
    preset = zoo.presets.resolve_config(name).to_dict()
    for ids in (read, preset):
        del ids["pad_id"], ids["bos_id"], ids["eos_id"]
    assert read == preset
