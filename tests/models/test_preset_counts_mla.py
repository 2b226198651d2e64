"""The latent-attention presets (DeepSeek-V3, DeepSeek-V2-Lite, GLM-4.7-Flash, Youtu-LLM-2B) have the
parameter count of the `transformers` model with the same published config values (both built on the meta
device, DeepSeek-V3's and GLM-4.7-Flash's without the multi-token-prediction layer, which transformers does
not build), and the total and active counts of their model cards: 671B / 37B, 15.7B / 2.4B, 30B / 3B
("30B-A3B") and 1.96B (dense: active is total), the active counts leaving out the token table (a lookup; the
unembedding is counted), each card's figure the count rounded or cut at its precision. GLM-4.7-Flash's and
Youtu-LLM-2B's values are their transformers config classes' defaults (Glm4MoeLiteConfig, YoutuConfig)."""

import math

import pytest
import torch
from transformers import (
    DeepseekV2Config,
    DeepseekV2ForCausalLM,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Glm4MoeLiteConfig,
    Glm4MoeLiteForCausalLM,
    YoutuConfig,
    YoutuForCausalLM,
)

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
    "glm4_7_flash": (Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM, dict(  # 20 heads do not divide d_model 2048
        vocab_size=154880, hidden_size=2048, intermediate_size=10240, moe_intermediate_size=1536,
        num_hidden_layers=47, num_attention_heads=20, n_routed_experts=64, n_shared_experts=1,
        num_experts_per_tok=4, n_group=1, topk_group=1, routed_scaling_factor=1.8, q_lora_rank=768,
        kv_lora_rank=512, qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256, rms_norm_eps=1e-5,
        max_position_embeddings=202752, mlp_layer_types=["dense"] + ["sparse"] * 46),
        ("30", "3")),
    "youtu_llm_2b": (YoutuConfig, YoutuForCausalLM, dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=6144, num_hidden_layers=32,
        num_attention_heads=16, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
        v_head_dim=128, rms_norm_eps=1e-6, max_position_embeddings=131072, tie_word_embeddings=True),
        ("1.96", None)),
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
    if active is None:  # dense: every weight is active, and no separate active count is given
        assert "active" not in counts
    else:
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
