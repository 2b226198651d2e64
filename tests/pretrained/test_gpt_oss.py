"""gpt-oss import/export parity against transformers' GptOssForCausalLM built from a small config (4 experts,
top-2, sliding and full layers, YaRN without truncation, every weight perturbed, sinks and routers far from
zero): logits on right- and left-padded batches within 1e-4, greedy tokens equal, export back to transformers
with equal logits; the MoE layer equals GptOssMLP; what zoo does not reproduce is refused by name."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import transformers
from transformers import GptOssConfig, GptOssForCausalLM
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, right_padded, saved
from zoo.config import ModelConfig
from zoo.modules.moe import MoE

SMALL = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
             intermediate_size=24, vocab_size=99, num_local_experts=4, num_experts_per_tok=2,
             max_position_embeddings=64, sliding_window=4, pad_token_id=0, bos_token_id=1, eos_token_id=2,
             router_aux_loss_coef=0.02,
             rope_parameters=dict(rope_type="yarn", factor=4.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                                  original_max_position_embeddings=16, rope_theta=500.0))


def tiny_gpt_oss(scale: float = 0.05, **kw) -> GptOssForCausalLM:
    hf = perturbed(GptOssForCausalLM(GptOssConfig(**{**SMALL, **kw})), scale=scale)
    with torch.no_grad():  # routers far from ties, sinks that matter
        for layer in hf.model.layers:
            layer.mlp.router.weight.normal_(0, 1.0)
            layer.self_attn.sinks.normal_(0, 1.0)
    return hf


def test_logits_match_on_padded_batches(tmp_path):
    hf = tiny_gpt_oss()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert (c.mixer.sinks, c.bias, c.activation, c.mixer.sliding_window, c.layer_pattern.to_data()) == (
        True, True, "swiglu_clamped", 4, ["local", "global"])
    scaling = c.positional.scaling
    assert (scaling.name, scaling.factor, scaling.truncate, scaling.original_max_len) == (
        "yarn", 4.0, False, 16)
    assert (c.ffn.n_experts, c.ffn.top_k, c.ffn.router.name, c.ffn.router_bias) == (
        4, 2, "topk_softmax", True)
    assert c.ffn.balance == {"aux": pytest.approx(0.04)}  # transformers' coefficient x top_k (docs/moe.md)
    assert [model.decoder_stack.local[i] for i in range(3)] == [True, False, True]
    assert all(isinstance(layer.ffn, MoE) for layer in model.decoder_stack.layers)
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


def test_layer_types_not_alternating_load_and_match(tmp_path):
    """Layer 0 full, the rest sliding (zoo refused this before model.layer_pattern): the same layers local,
    logits equal, and the export writes them back."""
    types = ["full_attention", "sliding_attention", "sliding_attention"]
    hf = tiny_gpt_oss(layer_types=types)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert [model.decoder_stack.local[i] for i in range(3)] == [False, True, True]
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)
    out = export_round_trips(model, GptOssForCausalLM, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["layer_types"] == types


def test_greedy_matches_transformers_generate(tmp_path):
    hf = tiny_gpt_oss(scale=0.3)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


def test_export_round_trip(tmp_path):
    hf = tiny_gpt_oss()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    out = export_round_trips(model, GptOssForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert (written["model_type"], written["num_local_experts"], written["num_experts_per_tok"]) == (
        "gpt_oss", 4, 2)
    assert written["layer_types"] == ["sliding_attention", "full_attention", "sliding_attention"]
    assert written["rope_parameters"]["truncate"] is False
    assert written["router_aux_loss_coef"] == pytest.approx(0.02)


def test_a_zoo_built_model_exports_as_gpt_oss(tmp_path):
    """Fresh zoo weights (sinks and router biases made nonzero), every layer global: transformers agrees."""
    model = zoo.build(dict(
        arch="decoder", vocab_size=99, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=16,
        activation="swiglu_clamped", norm="rmsnorm", positional="rope", bias=True, mixer={"sinks": True},
        tie_embeddings=False, max_seq_len=64,
        ffn={"name": "moe", "n_experts": 4, "top_k": 2, "router": "topk_softmax", "router_bias": True}))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    out = zoo.save_pretrained(model.eval(), tmp_path / "fresh", model_type="gpt_oss")
    right_padded_logits_match(GptOssForCausalLM.from_pretrained(out).eval(), model)


@pytest.mark.parametrize(("cls", "head", "field"), [
    ("GptOssModel", "none", "last_hidden_state"), ("GptOssForSequenceClassification", "classifier", "logits"),
    ("GptOssForTokenClassification", "token_classifier", "logits")])
def test_the_other_classes_load_and_export(tmp_path, cls, head, field):
    """Outputs at real tokens (the classifier pools the last non-pad one) equal transformers' within 1e-4,
    from the folder and from zoo's export of it."""
    hf_class = getattr(transformers, cls)
    hf = perturbed(hf_class(GptOssConfig(**SMALL, num_labels=3)))
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.head.name == head
    ids, mask = right_padded(3, 12, 99, [12, 9, 3])
    ids = ids.masked_fill(mask == 0, 0)
    back = hf_class.from_pretrained(zoo.save_pretrained(model, tmp_path / "export")).eval()
    with torch.no_grad():
        got = getattr(model(ids, attention_mask=mask), field)
        for ref in (hf, back):
            want = getattr(ref(input_ids=ids, attention_mask=mask), field)
            real = mask.bool() if want.dim() == 3 else slice(None)
            assert (got[real] - want[real]).abs().max() < 1e-4


def _hf_config(**kw) -> dict:
    return {"model_type": "gpt_oss", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "intermediate_size": 24, "vocab_size": 99, "num_local_experts": 4, **kw}


@pytest.mark.parametrize(("given", "named"), [
    ({"swiglu_limit": 5.0}, r"swiglu_limit=5.0 \(supported: 7.0\)"),
    ({"swiglu_alpha": 1.0}, r"swiglu_alpha=1.0 \(supported: 1.702\)"),
    ({"attention_bias": False}, r"attention_bias=False \(supported: True\)"),
    ({"layer_types": ["full_attention", "chunked_attention"]},
     r"layer_types in \(sliding_attention, full_attention\)=False"),
])
def test_what_zoo_does_not_reproduce_is_refused(given, named):
    with pytest.raises(ValueError, match=named):
        zoo.pretrained.FAMILIES.get("gpt_oss")().config_from_hf(_hf_config(**given))


def test_config_json_without_rope_parameters_reads_gpt_oss_defaults():
    """GptOssConfig's own defaults: YaRN x32 over 4096 positions, base 150000, no truncation; layers alternate
    sliding (0, 2, ...) and full, window 128."""
    cfg = zoo.pretrained.FAMILIES.get("gpt_oss")().config_from_hf(_hf_config())
    scaling = cfg.positional.scaling
    rope = (scaling.name, scaling.factor, scaling.original_max_len, cfg.positional.base, scaling.truncate)
    assert rope == ("yarn", 32.0, 4096, 150000.0, False)
    assert (cfg.mixer.sliding_window, cfg.layer_pattern.to_data(), cfg.head_size) == (
        128, ["local", "global"], 64)


HUB_20B = {  # openai/gpt-oss-20b's config.json as shipped (transformers 4.x spelling, MXFP4 experts)
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
    "initial_context_length": 4096, "initializer_range": 0.02, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 12, "max_position_embeddings": 131072,
    "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24,
    "num_key_value_heads": 8, "num_local_experts": 32, "output_router_logits": False, "pad_token_id": 199999,
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
    "rms_norm_eps": 1e-05, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                            "original_max_position_embeddings": 4096, "rope_type": "yarn",
                                            "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "use_cache": True, "vocab_size": 201088}


def test_the_hub_config_reads_as_the_gpt_oss_20b_preset():
    """The same model: every key that changes what the weights compute (the round trip's view) agrees."""
    from zoo.pretrained.roundtrip import effective

    read = zoo.pretrained.FAMILIES.get("gpt_oss")().config_from_hf(HUB_20B)
    given = zoo.presets.resolve_config("gpt_oss_20b")
    assert read.n_layers == given.n_layers == 24
    # the round trip's view builds the model on the meta device: 2 of the 24 layers say the same, faster
    ours, preset = (effective(dataclasses.replace(c, n_layers=2)) for c in (read, given))
    for key in ("pad_id", "bos_id", "eos_id"):  # token ids: the preset leaves them to the checkpoint
        ours.pop(key), preset.pop(key)
    assert ours == preset


def test_moe_layer_equals_transformers_gpt_oss_mlp_with_gradients():
    """zoo's MoE layer (biased router, experts with biases, swiglu_clamped) against GptOssMLP with the same
    weights, the fused gate_up columns split by hand (even: gate, odd: value), inputs large enough to
    clamp."""
    hf_cfg = GptOssConfig(hidden_size=16, intermediate_size=12, num_local_experts=4, num_experts_per_tok=2)
    ref = GptOssMLP(hf_cfg)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    cfg = ModelConfig(d_model=16, d_ff=12, activation="swiglu_clamped", bias=True,
                      ffn={"name": "moe", "n_experts": 4, "top_k": 2, "router": "topk_softmax",
                           "router_bias": True})
    ours = MoE(cfg, cfg.ffn)
    with torch.no_grad():
        ours.router.proj.weight.copy_(ref.router.weight)
        ours.router.proj.bias.copy_(ref.router.bias)
        for e, expert in enumerate(ours.experts):
            gate_up, bias = ref.experts.gate_up_proj[e], ref.experts.gate_up_proj_bias[e]  # (C, 2F), (2F,)
            expert.up.weight.copy_(torch.cat([gate_up[:, 0::2], gate_up[:, 1::2]], 1).t())
            expert.up.bias.copy_(torch.cat([bias[0::2], bias[1::2]]))
            expert.down.weight.copy_(ref.experts.down_proj[e].t())
            expert.down.bias.copy_(ref.experts.down_proj_bias[e])
    x = torch.randn(2, 5, 16, generator=gen) * 3
    x_ref, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    want, got = ref(x_ref)[0], ours(x_ours)
    assert (got - want).abs().max() < 1e-5
    assert bool((x_ours.reshape(-1, 16) @ ref.experts.gate_up_proj[0]).abs().max() > 7)  # clamps bite
    probe = torch.randn(got.shape, generator=gen)
    (want * probe).sum().backward()
    (got * probe).sum().backward()
    for mine, theirs in ((x_ours.grad, x_ref.grad), (ours.router.proj.bias.grad, ref.router.bias.grad),
                         (ours.experts[1].down.bias.grad, ref.experts.down_proj_bias.grad[1])):
        assert (mine - theirs).abs().max() <= 1e-5 * max(1.0, float(theirs.abs().max()))
