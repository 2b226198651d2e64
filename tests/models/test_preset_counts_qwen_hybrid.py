"""The Qwen hybrid presets (Qwen3.5-0.8B and 9B text models, Qwen3-Next-80B-A3B) have the parameter count of
the `transformers` model with the same published config values (both built on the meta device), and each is
the config zoo.from_pretrained reads from those values, key for key. The values: Qwen3.5-9B's are
transformers' Qwen3_5TextConfig defaults (its docstring: "the Qwen3.5-9B style configuration") with the
published length 262144 and RoPE base 1e7; Qwen3.5-0.8B's are the Hub config.json's text_config;
Qwen3-Next-80B-A3B's are Qwen3NextConfig's defaults with the published length, RoPE base and
intermediate_size 5120 (unused: every layer is MoE). Qwen3-Next's model card: 80B total, 3B active (the
active count leaving out the token table)."""

import pytest
import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig, Qwen3NextConfig, Qwen3NextForCausalLM

import zoo
from tests.models.test_preset_counts_mla import _card
from zoo.inspection import parameter_counts

ROPE = dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25)
MROPE = dict(ROPE, mrope_section=[11, 11, 10], mrope_interleaved=True)  # Qwen3.5's (the vision model's)
PRESETS = {  # preset -> (transformers classes, the model's config.json values, the card's total / active)
    "qwen3_5_0_8b": (Qwen3_5TextConfig, Qwen3_5ForCausalLM, dict(
        vocab_size=248320, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
        num_attention_heads=8, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
        linear_num_value_heads=16, max_position_embeddings=262144, tie_word_embeddings=True,
        rope_parameters=MROPE), None),
    "qwen3_5_9b": (Qwen3_5TextConfig, Qwen3_5ForCausalLM, dict(
        max_position_embeddings=262144, rope_parameters=MROPE), None),
    "qwen3_next_80b_a3b": (Qwen3NextConfig, Qwen3NextForCausalLM, dict(
        intermediate_size=5120, max_position_embeddings=262144, rope_parameters=ROPE), ("80", "3")),
}
SLOW = {"qwen3_next_80b_a3b"}  # 24,576 expert modules: seconds to build even on the meta device


def _param(name):
    return pytest.param(name, marks=pytest.mark.e2e) if name in SLOW else name


@pytest.mark.parametrize("name", [_param(n) for n in sorted(PRESETS)])
def test_qwen_hybrid_preset_counts_equal_transformers(name):
    config_class, model_class, values, card = PRESETS[name]
    with torch.device("meta"):
        hf = model_class(config_class(**values))
        ours = zoo.build(name)
    counts = parameter_counts(ours)
    assert counts["total"] == ours.num_parameters() == sum(p.numel() for p in hf.parameters())
    if card is not None:
        total, active = card
        assert _card(counts["total"], total), counts["total"]
        assert _card(counts["active"] - ours.embed.tokens.weight.numel(), active), counts["active"]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_qwen_hybrid_preset_is_what_the_family_reads_from_that_config(name):
    """Key for key (layer pattern, linear mixer, gated attention, norms, partial RoPE, experts) but the
    special token ids (the tokenizer's: a preset keeps zoo's defaults)."""
    config_class, _, values, _ = PRESETS[name]
    hf = config_class(**values).to_dict()
    read = zoo.pretrained.FAMILIES.get(hf["model_type"])().config_from_hf(hf).to_dict()
    preset = zoo.presets.resolve_config(name).to_dict()
    for ids in (read, preset):
        del ids["pad_id"], ids["bos_id"], ids["eos_id"]
    assert read == preset


def test_the_hubs_vision_language_config_reads_as_the_0_8b_preset():
    """Qwen/Qwen3.5-0.8B's config.json as the Hub ships it (a qwen3_5 folder: text_config inside, the tie on
    top, keys transformers does not read such as attn_output_gate and mtp_num_hidden_layers, the mrope
    sections) reads as the qwen3_5_0_8b preset but its eos id."""
    text = dict(PRESETS["qwen3_5_0_8b"][2], model_type="qwen3_5_text", attention_bias=False,
                hidden_act="silu", attn_output_gate=True, linear_key_head_dim=128, linear_value_head_dim=128,
                linear_conv_kernel_dim=4, rms_norm_eps=1e-6, full_attention_interval=4,
                mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False, eos_token_id=248044,
                layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 6)
    hub = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
           "image_token_id": 248056, "tie_word_embeddings": True, "vision_config": {"depth": 12},
           "text_config": text}
    read = zoo.pretrained.FAMILIES.get("qwen3_5")().config_from_hf(hub)
    assert read.eos_id == 248044
    assert read.to_dict() == {**zoo.presets.resolve_config("qwen3_5_0_8b").to_dict(), "eos_id": 248044}
