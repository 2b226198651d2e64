"""DeepSeek-V3 (Kimi K2's model_type) and DeepSeek-V2 import/export parity against transformers built from
small configs, every weight and the routers' correction biases perturbed: Multi-head Latent Attention
(low-rank and full-rank queries, interleaved and half rope, YaRN with DeepSeek's mscale), a dense first layer,
V3's grouped sigmoid routing with shared experts, V2's softmax greedy and group-limited greedy routing,
GLM-4.7-Flash's (glm4_moe_lite) per-layer MoE list, Youtu-LLM's dense tied decoder; logits
within 1e-4 on right- and left-padded batches, greedy tokens equal, the export read back by transformers
with equal logits."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch
from safetensors.torch import load_file, save_file
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
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved
from zoo.models.base import build_model
from zoo.modules.moe import MoE

LATENT = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=40, vocab_size=99,
              q_lora_rank=12, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6,
              max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
V3 = dict(LATENT, moe_intermediate_size=12, n_routed_experts=8, num_experts_per_tok=2, n_group=4,
          topk_group=2, n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5)
GLM = {k: v for k, v in V3.items() if k != "first_k_dense_replace"}
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
        "mscale": 1.0, "mscale_all_dim": 0.8}
MODELS = {"deepseek_v3": (DeepseekV3Config, DeepseekV3ForCausalLM, V3),
          "deepseek_v2": (DeepseekV2Config, DeepseekV2ForCausalLM, V3),
          "glm4_moe_lite": (Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM, GLM),
          "youtu": (YoutuConfig, YoutuForCausalLM, LATENT)}
DENSE_FIRST = [False, True, True]
VARIANTS = {  # id -> model_type, config settings, zoo router, which layers are MoE
    "v3_low_rank_q": ("deepseek_v3", {}, "sigmoid_bias", DENSE_FIRST),
    "v3_full_q_half_rope": ("deepseek_v3", dict(q_lora_rank=None, rope_interleave=False), "sigmoid_bias",
                            DENSE_FIRST),
    "v3_yarn_mscale": ("deepseek_v3", dict(rope_parameters=YARN), "sigmoid_bias", DENSE_FIRST),
    # transformers' latent norms keep RMSNorm's eps 1e-6 whatever rms_norm_eps says
    "v3_rms_norm_eps": ("deepseek_v3", dict(rms_norm_eps=1e-2), "sigmoid_bias", DENSE_FIRST),
    "v2_group_limited": ("deepseek_v2", dict(topk_method="group_limited_greedy", routed_scaling_factor=1.5,
                                             rope_parameters=YARN), "group_limited_greedy", DENSE_FIRST),
    "v2_lite_greedy": ("deepseek_v2", dict(q_lora_rank=None, n_group=None, topk_group=None,
                                           n_shared_experts=2), "softmax_topk", DENSE_FIRST),
    "glm4_moe_lite": ("glm4_moe_lite", dict(mlp_layer_types=["sparse", "dense", "sparse"],
                                            routed_scaling_factor=1.8), "sigmoid_bias", [True, False, True]),
    "youtu_tied": ("youtu", {}, None, [False] * 3),
    "youtu_half_rope": ("youtu", dict(tie_word_embeddings=False, rope_interleave=False, q_lora_rank=None),
                        None, [False] * 3),
}


def tiny(variant: str, scale: float = 0.05):
    model_type, settings, _, _ = VARIANTS[variant]
    config_class, model_class, base = MODELS[model_type]
    hf = perturbed(model_class(config_class(**{**base, **settings})), scale=scale)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # routers far from ties; a correction bias that changes which experts are chosen
        for layer in hf.model.layers:
            gate = getattr(layer.mlp, "gate", None)
            if gate is not None:
                gate.weight.normal_(0, 1.0, generator=gen)
            if hasattr(gate, "e_score_correction_bias"):
                gate.e_score_correction_bias.copy_(torch.randn(8, generator=gen) * 0.3)
        if model_type == "youtu":  # transformers 5.25's Youtu zeroes the pad row when it loads (its own
            hf.model.embed_tokens.weight[hf.config.pad_token_id] = 0  # folders too): as it would load
    return hf


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_match_on_padded_batches(tmp_path, variant):
    hf = tiny(variant)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    cfg = model.config
    _, _, router, moe_layers = VARIANTS[variant]
    assert [isinstance(layer.ffn, MoE) for layer in model.decoder_stack.layers] == moe_layers
    assert (cfg.mixer.name, getattr(cfg.ffn, "router", None)) == ("mla", router and cfg.ffn.router)
    assert router is None or cfg.ffn.router.name == router
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


@pytest.mark.parametrize("variant", ["v3_low_rank_q", "v2_group_limited", "glm4_moe_lite", "youtu_tied"])
def test_greedy_matches_transformers_generate(tmp_path, variant):
    hf = tiny(variant, scale=0.3)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "v3_full_q_half_rope"])
def test_export_round_trip(tmp_path, variant):
    model_type, settings, _, _ = VARIANTS[variant]
    model = zoo.from_pretrained(saved(tiny(variant), tmp_path))
    out = export_round_trips(model, MODELS[model_type][1], tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    if model_type.startswith("deepseek"):
        scale = settings.get("routed_scaling_factor", 2.5)
        assert (written["first_k_dense_replace"], written["routed_scaling_factor"]) == (1, scale)
    if model_type == "glm4_moe_lite":
        assert written["mlp_layer_types"] == ["sparse", "dense", "sparse"]
    if "rope_parameters" in settings:
        assert written["rope_parameters"]["mscale_all_dim"] == 0.8


@pytest.mark.parametrize("norm_eps", [1e-6, 1e-5])
def test_a_model_trained_in_zoo_exports_where_its_latent_norms_agree(tmp_path, norm_eps):
    """model.mixer.latent_norm_eps null means model.norm_eps: a zoo-built model whose norm_eps is the 1e-6
    transformers' latent norms keep exports with equal logits; with 1e-5 it is refused naming the key."""
    loaded = zoo.from_pretrained(saved(tiny("v3_low_rank_q"), tmp_path))
    cfg = loaded.config
    mixer = dataclasses.replace(cfg.mixer, latent_norm_eps=None)
    cfg = dataclasses.replace(cfg, norm_eps=norm_eps, mixer=mixer)
    model = build_model(cfg).eval()
    model.load_state_dict(loaded.state_dict())
    if norm_eps == 1e-6:
        out = zoo.save_pretrained(model, tmp_path / "export", model_type="deepseek_v3")
        right_padded_logits_match(DeepseekV3ForCausalLM.from_pretrained(out).eval(), model)
    else:
        with pytest.raises(ValueError, match=re.escape(
                "cannot express model.mixer.latent_norm_eps=1e-05 (would load as 1e-06)")):
            zoo.save_pretrained(model, tmp_path / "export", model_type="deepseek_v3")


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


def test_glm_layer_types_zoo_cannot_reproduce_are_named():
    family = zoo.pretrained.FAMILIES.get("glm4_moe_lite")()
    hf = {"model_type": "glm4_moe_lite", **GLM, "mlp_layer_types": ["dense", "shared", "sparse"]}
    with pytest.raises(ValueError, match=re.escape("mlp_layer_types (dense or sparse, one per layer)=False")):
        family.config_from_hf(hf)


@pytest.mark.parametrize("variant", ["v3_low_rank_q", "glm4_moe_lite"])
def test_multi_token_prediction_layers_are_left_out(tmp_path, variant):
    """The Hub's DeepSeek-V3 / GLM-4.7-Flash files hold num_nextn_predict_layers extra layers after the last
    (`model.layers.<n_layers>.*`: a layer plus enorm, hnorm, eh_proj, shared_head), which transformers does
    not build: with mtp=None zoo loads the model without them, with transformers' logits, and warns that it
    left them (without it they load as model.mtp: tests/pretrained/test_deepseek_mtp.py; here GLM's layer is
    a MoE layer where its layer pattern tiles to a dense one, which is named)."""
    hf = tiny(variant)
    path = saved(hf, tmp_path)
    weights = load_file(path / "model.safetensors")
    last, n = hf.config.num_hidden_layers - 1, hf.config.num_hidden_layers
    mtp = {k.replace(f"layers.{last}.", f"layers.{n}."): v.clone() for k, v in weights.items()
           if k.startswith(f"model.layers.{last}.")}
    d = hf.config.hidden_size
    mtp.update({f"model.layers.{n}.{name}": tensor for name, tensor in [
        ("enorm.weight", torch.ones(d)), ("hnorm.weight", torch.ones(d)),
        ("eh_proj.weight", torch.zeros(d, 2 * d)), ("shared_head.norm.weight", torch.ones(d))]})
    save_file({**weights, **mtp}, path / "model.safetensors", metadata={"format": "pt"})
    written = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**written, "num_nextn_predict_layers": 1}))
    with pytest.warns(UserWarning, match=f"model.layers.{n}"):
        model = zoo.from_pretrained(path, mtp=None)
    right_padded_logits_match(hf, model)
    if variant.startswith("glm"):  # [sparse, dense, sparse] tiles to a dense layer 3
        with pytest.raises(ValueError, match=r"multi-token-prediction layer 3 holds a Mixture of Experts, "
                                             r"but model.layer_pattern=.* makes it a dense FFN"):
            zoo.from_pretrained(path)
    else:
        assert zoo.from_pretrained(path).config.mtp.depth == 1


def test_v2_lite_greedy_routes_in_float32_in_a_bf16_model(tmp_path):
    """transformers' DeepseekV2 router, greedy (V2-Lite) as well as group-limited, computes its logits in
    float32 from a float32 mlp.gate (kept float32 in a bf16 model): zoo's deepseek_v2 family reads greedy as
    softmax_topk with float32 true, so a bf16 V2-Lite-shaped model chooses the experts transformers' bf16
    model does. 6 of 64 experts, init-sized gate weights (close calls): bf16 logits chose others for some of
    the 4,096 tokens."""
    d, e = 128, 64
    hf = DeepseekV2ForCausalLM(DeepseekV2Config(
        **{**LATENT, "num_hidden_layers": 2, "hidden_size": d, "q_lora_rank": None}, n_group=None,
        topk_group=None, topk_method="greedy", moe_intermediate_size=4, n_routed_experts=e,
        num_experts_per_tok=6, n_shared_experts=1, first_k_dense_replace=1))
    torch.manual_seed(0)
    with torch.no_grad():
        hf.model.layers[1].mlp.gate.weight.normal_(0, 0.02)
    path = saved(hf, tmp_path)
    hf = DeepseekV2ForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    model = zoo.from_pretrained(path, dtype=torch.bfloat16)
    x = torch.randn(4096, d).bfloat16()  # a bf16 model's hidden states
    with torch.no_grad():
        _, _, want = hf.model.layers[1].mlp.gate(x)
        got = model.decoder_stack.layers[1].ffn.router(x)
    differ = (got.experts.sort(dim=-1).values != want.sort(dim=-1).values).any(dim=-1)
    assert int(differ.sum()) == 0
    assert model.config.ffn.router.to_data() == {"name": "softmax_topk", "float32": True}
