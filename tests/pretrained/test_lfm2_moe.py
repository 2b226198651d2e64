"""LFM2-MoE (LFM2-8B-A1B's layout) import/export parity against transformers' Lfm2Moe built from small
configs, every weight perturbed and the routers far from ties: conv and attention layers by `layer_types`,
dense first layers (`num_dense_layers`), sigmoid routing with the expert bias, renormalised or not, scaled;
logits within 1e-4 on right- and left-padded batches, greedy tokens equal to transformers' generate, the
export read back by transformers with equal logits, the bare Lfm2MoeModel; routing without the expert bias
is one error."""

from __future__ import annotations

import json
import re

import pytest
import torch
from transformers import Lfm2MoeConfig, Lfm2MoeForCausalLM, Lfm2MoeModel

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, right_padded, saved
from zoo.modules.moe import MoE
from zoo.modules.short_conv import ShortConv

BASE = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=40, moe_intermediate_size=12, num_experts=6, num_experts_per_tok=2,
            num_dense_layers=1, vocab_size=99, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, layer_types=["conv", "conv", "full_attention", "conv"])
VARIANTS = {"normalised": {}, "scaled_not_normalised": dict(norm_topk_prob=False, routed_scaling_factor=1.7,
                                                            tie_word_embeddings=False, num_dense_layers=2)}


def tiny(variant: str, scale: float = 0.05):
    hf = perturbed(Lfm2MoeForCausalLM(Lfm2MoeConfig(**{**BASE, **VARIANTS[variant]})), scale=scale)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # routers far from ties; an expert bias that changes which experts are chosen
        for layer in hf.model.layers:
            if hasattr(layer.feed_forward, "gate"):
                layer.feed_forward.gate.weight.normal_(0, 1.0, generator=gen)
                layer.feed_forward.expert_bias.copy_(torch.randn(6, generator=gen) * 0.3)
    return hf


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_match_on_padded_batches(tmp_path, variant):
    hf = tiny(variant)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    dense = VARIANTS[variant].get("num_dense_layers", 1)
    layers = model.decoder_stack.layers
    assert [isinstance(layer.ffn, MoE) for layer in layers] == [i >= dense for i in range(4)]
    assert [isinstance(layer.self_attn, ShortConv) for layer in layers] == [True, True, False, True]
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


def test_greedy_matches_transformers_generate(tmp_path):
    hf = tiny("normalised", scale=0.3)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


@pytest.mark.parametrize("variant", VARIANTS)
def test_export_round_trip(tmp_path, variant):
    model = zoo.from_pretrained(saved(tiny(variant), tmp_path))
    out = export_round_trips(model, Lfm2MoeForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert written["num_dense_layers"] == VARIANTS[variant].get("num_dense_layers", 1)
    assert written["layer_types"] == BASE["layer_types"]


def test_routing_without_the_expert_bias_is_one_error():
    family = zoo.pretrained.FAMILIES.get("lfm2_moe")()
    with pytest.raises(ValueError, match=re.escape("use_expert_bias=False (supported: True)")):
        family.config_from_hf({"model_type": "lfm2_moe", **BASE, "use_expert_bias": False})


def test_the_bare_model_loads(tmp_path):
    hf = perturbed(Lfm2MoeModel(Lfm2MoeConfig(**BASE)))
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.head.name == "none"
    ids, mask = right_padded(2, 10, 99, [10, 6])
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        got = model(ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (got[real] - ref[real]).abs().max() < 1e-4
