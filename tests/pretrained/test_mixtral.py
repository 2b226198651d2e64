"""Mixtral import/export parity against transformers' MixtralForCausalLM built from a small config (4 experts,
top-2, every weight perturbed): logits on right- and left-padded batches within 1e-4, greedy tokens equal,
export back to transformers with equal logits; config keys both ways; what zoo cannot express is named."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import MixtralConfig, MixtralForCausalLM

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved
from zoo.modules.moe import MoE, moe_layers


def tiny_mixtral(scale: float = 0.05, **kw):
    cfg = MixtralConfig(**{**dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, intermediate_size=24, vocab_size=99,
                                  num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
                                  rope_theta=500.0, router_aux_loss_coef=0.02, pad_token_id=0, bos_token_id=1,
                                  eos_token_id=2), **kw})
    hf = perturbed(MixtralForCausalLM(cfg), scale=scale)
    with torch.no_grad():  # routers far from ties: the choice of experts does not hang on rounding
        for layer in hf.model.layers:
            layer.mlp.gate.weight.normal_(0, 1.0)
    return hf


def test_logits_match_on_padded_batches(tmp_path):
    hf = tiny_mixtral()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert (c.ffn.name, c.ffn.n_experts, c.ffn.top_k, c.ffn.router.name) == ("moe", 4, 2, "topk_softmax")
    assert c.ffn.balance == {"aux": pytest.approx(0.04)}  # transformers' coefficient x top_k (docs/moe.md)
    assert len(moe_layers(model)) == 2
    assert all(isinstance(layer.ffn, MoE) for layer in model.decoder_stack.layers)
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


def test_greedy_matches_transformers_generate(tmp_path):
    hf = tiny_mixtral(scale=0.3)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


def test_export_round_trip(tmp_path):
    hf = tiny_mixtral(tie_word_embeddings=True)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    out = export_round_trips(model, MixtralForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert (written["model_type"], written["num_local_experts"], written["num_experts_per_tok"]) == (
        "mixtral", 4, 2)
    assert written["router_aux_loss_coef"] == pytest.approx(0.02)


def test_a_zoo_moe_model_exports_as_mixtral_and_what_mixtral_cannot_say_is_named(tmp_path):
    model = zoo.build("moe_small", vocab_size=99, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=16,
                      ffn={"n_experts": 4, "top_k": 2}).eval()
    out = zoo.save_pretrained(model, tmp_path / "fresh", model_type="mixtral")
    right_padded_logits_match(MixtralForCausalLM.from_pretrained(out).eval(), model)
    shared = zoo.build("moe_small", vocab_size=99, d_model=32, n_layers=2, n_heads=4, d_ff=16,
                       ffn={"n_experts": 4, "top_k": 2, "n_shared_experts": 1, "router": "softmax_topk"})
    with pytest.raises(ValueError, match=r"'mixtral': its config.json cannot express "
                                         r"model.ffn.n_shared_experts=1 .*model.ffn.router='softmax_topk'"):
        zoo.save_pretrained(shared, tmp_path / "x", model_type="mixtral")
    with pytest.raises(ValueError, match=r"router_jitter_noise=0.1 \(supported: 0.0\)"):
        zoo.pretrained.FAMILIES.get("mixtral")().config_from_hf(
            {"model_type": "mixtral", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
             "intermediate_size": 40, "vocab_size": 99, "router_jitter_noise": 0.1})
