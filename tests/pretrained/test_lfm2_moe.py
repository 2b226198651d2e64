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


def test_a_bf16_model_routes_as_transformers_does(tmp_path):
    """transformers' Lfm2MoeTopKRouter routes in the model's dtype: bf16 logits, a bf16 sigmoid, the float32
    expert_bias added only to choose, the chosen bf16 scores renormalised with sum + 1e-6 and scaled in bf16.
    zoo's lfm2_moe import says so (router.float32 false, renorm_eps 1e-6; the bias stays float32): given the
    hidden states transformers' bf16 model routes, zoo's bf16 router chooses the same experts for every one of
    the 256 tokens with the same weights, and the logits agree. 32 experts, top-4, init-sized gate (close
    calls): zoo's float32 routing chose other experts for 37 of them (scores rounded to bf16 before
    the bias is added decide the near-ties)."""
    e = 32
    hf = Lfm2MoeForCausalLM(Lfm2MoeConfig(**{
        **BASE, "num_hidden_layers": 2, "layer_types": ["conv", "full_attention"], "num_experts": e,
        "num_experts_per_tok": 4, "moe_intermediate_size": 8, "routed_scaling_factor": 1.5}))
    torch.manual_seed(0)
    with torch.no_grad():
        hf.model.layers[1].feed_forward.expert_bias.copy_(torch.randn(e) * 0.01)
    path = saved(hf, tmp_path)
    hf = Lfm2MoeForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    model = zoo.from_pretrained(path, dtype=torch.bfloat16)
    router = model.decoder_stack.layers[1].ffn.router
    assert (router.proj.weight.dtype, router.bias.dtype) == (torch.bfloat16, torch.float32)
    seen = {}
    gate = hf.model.layers[1].feed_forward.gate
    gate.register_forward_hook(lambda module, args, out: seen.update(x=args[0], out=out))
    ids = torch.randint(3, 99, (2, 128), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = hf(input_ids=ids).logits
        got = model(ids).logits
        routing = router(seen["x"])
    _, want_weights, want_experts = seen["out"]
    order, want_order = routing.experts.argsort(dim=-1), want_experts.argsort(dim=-1)
    differ = (routing.experts.gather(-1, order) != want_experts.gather(-1, want_order)).any(dim=-1)
    assert int(differ.sum()) == 0
    assert torch.equal(routing.weights.gather(-1, order), want_weights.gather(-1, want_order))
    torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-2)  # bf16's resolution


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
