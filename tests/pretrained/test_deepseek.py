"""DeepSeek-V3 (Kimi K2's model_type) and DeepSeek-V2 import/export parity against transformers built from
small configs, every weight and the routers' correction biases perturbed: Multi-head Latent Attention
(low-rank and full-rank queries, interleaved and half rope, YaRN with DeepSeek's mscale), a dense first layer,
V3's grouped sigmoid routing with shared experts, V2's softmax greedy and group-limited greedy routing; logits
within 1e-4 on right- and left-padded batches, greedy tokens equal, the export read back by transformers
with equal logits."""

from __future__ import annotations

import json
import re

import pytest
import torch
from transformers import DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved
from zoo.modules.moe import MoE

V3 = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=40,
          moe_intermediate_size=12, vocab_size=99, n_routed_experts=8, num_experts_per_tok=2, n_group=4,
          topk_group=2, n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5,
          q_lora_rank=12, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6,
          max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
        "mscale": 1.0, "mscale_all_dim": 0.8}
MODELS = {"deepseek_v3": (DeepseekV3Config, DeepseekV3ForCausalLM),
          "deepseek_v2": (DeepseekV2Config, DeepseekV2ForCausalLM)}
VARIANTS = {  # id -> model_type, config settings, zoo router
    "v3_low_rank_q": ("deepseek_v3", {}, "sigmoid_bias"),
    "v3_full_q_half_rope": ("deepseek_v3", dict(q_lora_rank=None, rope_interleave=False), "sigmoid_bias"),
    "v3_yarn_mscale": ("deepseek_v3", dict(rope_parameters=YARN), "sigmoid_bias"),
    "v2_group_limited": ("deepseek_v2", dict(topk_method="group_limited_greedy", routed_scaling_factor=1.5,
                                             rope_parameters=YARN), "group_limited_greedy"),
    "v2_lite_greedy": ("deepseek_v2", dict(q_lora_rank=None, n_group=None, topk_group=None,
                                           n_shared_experts=2), "softmax_topk"),
}


def tiny(variant: str, scale: float = 0.05):
    model_type, settings, _ = VARIANTS[variant]
    config_class, model_class = MODELS[model_type]
    hf = perturbed(model_class(config_class(**{**V3, **settings})), scale=scale)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # routers far from ties; a correction bias that changes which experts are chosen
        for layer in hf.model.layers[hf.config.first_k_dense_replace:]:
            layer.mlp.gate.weight.normal_(0, 1.0, generator=gen)
            if hasattr(layer.mlp.gate, "e_score_correction_bias"):
                layer.mlp.gate.e_score_correction_bias.copy_(torch.randn(8, generator=gen) * 0.3)
    return hf


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_match_on_padded_batches(tmp_path, variant):
    hf = tiny(variant)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    cfg = model.config
    assert [isinstance(layer.ffn, MoE) for layer in model.decoder_stack.layers] == [False, True, True]
    assert (cfg.mixer.name, cfg.ffn.router.name) == ("mla", VARIANTS[variant][2])
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


@pytest.mark.parametrize("variant", ["v3_low_rank_q", "v2_group_limited"])
def test_greedy_matches_transformers_generate(tmp_path, variant):
    hf = tiny(variant, scale=0.3)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


@pytest.mark.parametrize("variant", ["v3_low_rank_q", "v3_yarn_mscale", "v2_group_limited", "v2_lite_greedy"])
def test_export_round_trip(tmp_path, variant):
    model_type, settings, _ = VARIANTS[variant]
    model = zoo.from_pretrained(saved(tiny(variant), tmp_path))
    out = export_round_trips(model, MODELS[model_type][1], tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    scale = settings.get("routed_scaling_factor", 2.5)
    assert (written["first_k_dense_replace"], written["routed_scaling_factor"]) == (1, scale)
    if "rope_parameters" in settings:
        assert written["rope_parameters"]["mscale_all_dim"] == 0.8


def test_routing_zoo_cannot_reproduce_is_named():
    family = zoo.pretrained.FAMILIES.get("deepseek_v3")()
    hf = {"model_type": "deepseek_v3", **V3, "topk_method": "greedy", "scoring_func": "softmax"}
    with pytest.raises(ValueError, match=re.escape("topk_method='greedy' (supported: 'noaux_tc')") +
                       ".*" + re.escape("scoring_func='softmax' (supported: 'sigmoid')")):
        family.config_from_hf(hf)


def test_v2_settings_zoo_cannot_reproduce_are_named():
    """transformers' DeepSeek-V2 ignores norm_topk_prob (DeepSeek's own code does not): refused, with an
    unknown topk_method."""
    family = zoo.pretrained.FAMILIES.get("deepseek_v2")()
    hf = {"model_type": "deepseek_v2", **V3, "topk_method": "noaux_tc", "norm_topk_prob": True}
    with pytest.raises(ValueError, match=re.escape("norm_topk_prob=True (supported: False)") + ".*" +
                       re.escape("topk_method='noaux_tc' (supported: greedy, group_limited_greedy)")):
        family.config_from_hf(hf)
