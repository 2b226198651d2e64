"""Qwen2-MoE (gated shared expert, a dense first layer) and Qwen3-MoE (MoE every 2nd layer, q/k norms)
import/export parity against transformers built from small configs, every weight perturbed: logits within 1e-4
on right- and left-padded batches, greedy tokens equal, export read back by transformers with equal logits."""

from __future__ import annotations

import json
import re

import pytest
import torch
from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved
from zoo.modules.moe import MoE

BASE = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=40, moe_intermediate_size=12, vocab_size=99, num_experts=4,
            num_experts_per_tok=2, max_position_embeddings=64, rope_theta=500.0, router_aux_loss_coef=0.01,
            pad_token_id=0, bos_token_id=1, eos_token_id=2)
FAMILIES = {  # model_type -> (config class, model class, settings, which layers are MoE)
    "qwen2_moe": (Qwen2MoeConfig, Qwen2MoeForCausalLM,
                  dict(shared_expert_intermediate_size=24, mlp_only_layers=[0], norm_topk_prob=True),
                  [False, True, True]),
    "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM, dict(decoder_sparse_step=2), [False, True, False]),
}


def tiny(model_type: str, scale: float = 0.05, layers: list[bool] | None = None, **kw):
    config_class, model_class, settings, sparse_layers = FAMILIES[model_type]
    hf = perturbed(model_class(config_class(**{**BASE, **settings, **kw})), scale=scale)
    with torch.no_grad():  # routers far from ties: the choice of experts does not hang on rounding
        for layer, sparse in zip(hf.model.layers, layers or sparse_layers, strict=True):
            if sparse:
                layer.mlp.gate.weight.normal_(0, 1.0)
    return hf


@pytest.mark.parametrize("model_type", FAMILIES)
def test_logits_match_on_padded_batches(tmp_path, model_type):
    hf = tiny(model_type)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert [isinstance(layer.ffn, MoE) for layer in model.decoder_stack.layers] == FAMILIES[model_type][3]
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_greedy_matches_transformers_generate(tmp_path, model_type):
    hf = tiny(model_type, scale=0.3)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


@pytest.mark.parametrize("model_type", FAMILIES)
def test_export_round_trip(tmp_path, model_type):
    hf = tiny(model_type, norm_topk_prob=False)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.ffn.router.name == "softmax_topk"
    out = export_round_trips(model, FAMILIES[model_type][1], tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert written["router_aux_loss_coef"] == pytest.approx(0.01)


def test_what_qwen2_moe_cannot_say_is_named():
    family = zoo.pretrained.FAMILIES.get("qwen2_moe")()
    hf = {"model_type": "qwen2_moe", **BASE, "shared_expert_intermediate_size": 20, "decoder_sparse_step": 0}
    with pytest.raises(ValueError, match=re.escape("decoder_sparse_step (a positive integer)=False") +
                       r" .*shared_expert_intermediate_size a multiple of moe_intermediate_size=False"):
        family.config_from_hf(hf)


def test_dense_layers_anywhere_load_match_and_export(tmp_path):
    """mlp_only_layers need not be the first layers (model.layer_pattern holds what each layer is): a dense
    third layer of four loads with transformers' logits and is written back as mlp_only_layers."""
    layers = [True, True, False, True]
    hf = tiny("qwen2_moe", layers=layers, num_hidden_layers=4, mlp_only_layers=[2])
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert [isinstance(layer.ffn, MoE) for layer in model.decoder_stack.layers] == layers
    assert model.config.layer_pattern.to_data() == ["moe", "moe", "dense"]  # tiled: layer 3 is MoE
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)
    out = export_round_trips(model, Qwen2MoeForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert (written["mlp_only_layers"], written["decoder_sparse_step"]) == ([2], 1)


def test_windows_and_dense_layers_share_one_layer_pattern():
    """A window from layer 1 on and a dense layer 0: both per-layer lists in one model.layer_pattern, each
    layer as transformers builds it, and written back as both lists."""
    family = zoo.pretrained.FAMILIES.get("qwen2_moe")()
    kinds = ["full_attention", "sliding_attention", "sliding_attention"]
    hf = {"model_type": "qwen2_moe", **BASE, "shared_expert_intermediate_size": 24,
          "use_sliding_window": True, "sliding_window": 4, "layer_types": kinds, "mlp_only_layers": [0]}
    cfg = family.config_from_hf(hf)
    assert cfg.layer_pattern.to_data() == {"prefix": ["global+dense"], "cycle": ["local+moe"]}
    assert [(cfg.layer_is_local(i), cfg.layer_is_moe(i)) for i in range(3)] == [(False, False), (True, True),
                                                                                (True, True)]
    written = family.config_to_hf(cfg)
    assert (written["layer_types"], written["mlp_only_layers"]) == (kinds, [0])


def test_qwen3_moe_window_is_on_every_layer(tmp_path):
    """transformers' Qwen3-MoE slides on every layer once use_sliding_window is set (it has no layer_types
    and no max_window_layers): zoo reads the window onto every layer, with its logits."""
    hf = tiny("qwen3_moe", use_sliding_window=True, sliding_window=4)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    cfg = model.config
    assert cfg.mixer.sliding_window == 4 and all(map(cfg.layer_is_local, range(3)))
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


def test_qwen2_moe_without_layer_types_slides_on_its_even_layers(tmp_path):
    """A config.json without layer_types: Qwen2MoeConfig slides on the even layers below max_window_layers
    (not Qwen2's layers from max_window_layers on); zoo reads the same layers, with transformers' logits."""
    hf = tiny("qwen2_moe", use_sliding_window=True, sliding_window=4, max_window_layers=3)
    assert hf.config.layer_types == ["sliding_attention", "full_attention", "sliding_attention"]
    path = saved(hf, tmp_path)
    written = json.loads((path / "config.json").read_text())
    del written["layer_types"]
    (path / "config.json").write_text(json.dumps(written))
    model = zoo.from_pretrained(path)
    assert [model.config.layer_is_local(i) for i in range(3)] == [True, False, True]
    right_padded_logits_match(hf, model)
