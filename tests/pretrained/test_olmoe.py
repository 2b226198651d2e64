"""OLMoE import/export parity against transformers' OlmoeForCausalLM built from a small config (4 experts,
top-2, q/k norms over the whole projections, every weight perturbed): logits within 1e-4 on right- and
left-padded batches, greedy tokens equal, export read back by transformers with equal logits."""

from __future__ import annotations

import pytest
import torch
from transformers import OlmoeConfig, OlmoeForCausalLM

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved


def tiny_olmoe(scale: float = 0.05, **kw):
    cfg = OlmoeConfig(**{**dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, intermediate_size=24, vocab_size=99, num_experts=4,
                                num_experts_per_tok=2, max_position_embeddings=64, rope_theta=500.0,
                                pad_token_id=0, bos_token_id=1, eos_token_id=2), **kw})
    hf = perturbed(OlmoeForCausalLM(cfg), scale=scale)
    with torch.no_grad():  # routers far from ties: the choice of experts does not hang on rounding
        for layer in hf.model.layers:
            layer.mlp.gate.weight.normal_(0, 1.0)
    return hf


@pytest.mark.parametrize("norm_topk_prob", [False, True])
def test_logits_match_on_padded_batches(tmp_path, norm_topk_prob):
    hf = tiny_olmoe(norm_topk_prob=norm_topk_prob)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert (c.mixer.qk_norm, c.mixer.qk_norm_scope, c.ffn.router.name) == (
        True, "all", "softmax_topk_norm" if norm_topk_prob else "softmax_topk")
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


def test_greedy_matches_and_export_round_trips(tmp_path):
    hf = tiny_olmoe(scale=0.3)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    greedy_matches(hf, model)
    export_round_trips(model, OlmoeForCausalLM, tmp_path / "export")


def test_clip_qkv_is_refused():
    with pytest.raises(ValueError, match=r"clip_qkv=8.0 \(supported: None\)"):
        zoo.pretrained.FAMILIES.get("olmoe")().config_from_hf(
            {"model_type": "olmoe", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
             "intermediate_size": 24, "vocab_size": 99, "clip_qkv": 8.0})
