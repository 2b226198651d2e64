"""Qwen2 (q/k/v biases only) and Qwen3 (per-head q/k RMSNorm, head_dim apart from hidden/heads) import/export
parity against transformers' Qwen2ForCausalLM / Qwen3ForCausalLM; Llama's attention_bias (q, k, v and o)
beside Qwen2's for contrast."""

from __future__ import annotations

import json
import re

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=40, vocab_size=99, max_position_embeddings=64, rope_theta=500.0, pad_token_id=0,
            bos_token_id=1, eos_token_id=2)


def tiny(config_class, model_class, scale: float = 0.05, **kw):
    return perturbed(model_class(config_class(**{**TINY, **kw})), scale=scale)


def test_qwen2_qkv_biases_logits_match(tmp_path):
    hf = tiny(Qwen2Config, Qwen2ForCausalLM)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert (c.mixer.qkv_bias, c.bias, c.mixer.sliding_window) == (True, False, None)
    layer = model.decoder_stack.layers[0]
    assert (layer.self_attn.qkv.bias is not None and layer.self_attn.o.bias is None
            and layer.ffn.up.bias is None)
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


def test_llama_attention_bias_is_on_q_k_v_and_o(tmp_path):
    hf = perturbed(LlamaForCausalLM(LlamaConfig(**TINY, attention_bias=True, mlp_bias=True)))
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert (model.config.bias, model.config.use_qkv_bias) == (True, True)
    right_padded_logits_match(hf, model)
    export_round_trips(model, LlamaForCausalLM, tmp_path / "export")


@pytest.mark.parametrize(("config_class", "model_class"),
                         [(Qwen2Config, Qwen2ForCausalLM), (Qwen3Config, Qwen3ForCausalLM)],
                         ids=["qwen2", "qwen3"])
def test_greedy_matches_transformers_generate(tmp_path, config_class, model_class):
    hf = tiny(config_class, model_class, scale=0.3, head_dim=16)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


def test_qwen2_export_round_trip(tmp_path):
    model = zoo.from_pretrained(saved(tiny(Qwen2Config, Qwen2ForCausalLM, tie_word_embeddings=True),
                                      tmp_path))
    export_round_trips(model, Qwen2ForCausalLM, tmp_path / "export")


def test_qwen2_sliding_window_on_every_layer_maps_exactly(tmp_path):
    hf = tiny(Qwen2Config, Qwen2ForCausalLM, use_sliding_window=True, sliding_window=4, max_window_layers=0)
    assert hf.config.layer_types == ["sliding_attention"] * 2
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert (model.config.mixer.sliding_window, model.config.layer_pattern.to_data()) == (4, [])
    right_padded_logits_match(hf, model)
    out = export_round_trips(model, Qwen2ForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert ((written["use_sliding_window"], written["sliding_window"], written["max_window_layers"])
            == (True, 4, 0))


def test_qwen2_window_on_some_layers_maps_exactly(tmp_path):
    """max_window_layers=1: layer 0 attends fully, layers 1 and 2 within the window (model.layer_pattern
    {prefix: [global], cycle: [local]}); transformers' logits, and written back as layer_types."""
    kinds = ["full_attention", "sliding_attention", "sliding_attention"]
    hf = tiny(Qwen2Config, Qwen2ForCausalLM, use_sliding_window=True, sliding_window=4, max_window_layers=1,
              num_hidden_layers=3)
    assert hf.config.layer_types == kinds
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert (model.config.mixer.sliding_window, model.config.layer_pattern.to_data()) == (
        4, {"prefix": ["global"], "cycle": ["local"]})
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)
    out = export_round_trips(model, Qwen2ForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert (written["layer_types"], written["sliding_window"]) == (kinds, 4)
    ids = torch.randint(3, 99, (1, 12))
    with torch.no_grad():  # the window acts: without it layers 1 and 2 read every key
        full = zoo.from_pretrained(out, mixer={"sliding_window": None}, layer_pattern=[])
        assert (full(ids).logits - model(ids).logits).abs().max() > 1e-3


def test_qwen2_layer_kinds_zoo_cannot_reproduce_are_named(tmp_path):
    hf = tiny(Qwen2Config, Qwen2ForCausalLM, use_sliding_window=True, sliding_window=4,
              layer_types=["full_attention", "chunked_attention"])
    with pytest.raises(ValueError, match=re.escape(
            "layer_types (full_attention or sliding_attention, one per layer)=False (supported: True)")):
        zoo.from_pretrained(saved(hf, tmp_path))


def test_qwen3_qk_norm_and_head_dim_logits_match(tmp_path):
    hf = tiny(Qwen3Config, Qwen3ForCausalLM, head_dim=16)  # 16 != 32 / 4
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert (c.mixer.qk_norm, c.head_dim, c.use_qkv_bias, c.bias) == (True, 16, False, False)
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)
    export_round_trips(model, Qwen3ForCausalLM, tmp_path / "export")


def test_zoo_model_with_qk_norm_exports_as_qwen3(tmp_path):
    model = zoo.build("llama_small", vocab_size=99, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=24,
                      mixer={"qk_norm": True}).eval()
    out = zoo.save_pretrained(model, tmp_path / "fresh")  # llama cannot keep qk_norm: qwen3 is chosen
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen3"
    right_padded_logits_match(Qwen3ForCausalLM.from_pretrained(out).eval(), model)


def test_settings_qwen_cannot_express_are_named(tmp_path):
    hf = {"model_type": "qwen3", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
          "intermediate_size": 40, "vocab_size": 99, "attention_bias": True}
    with pytest.raises(ValueError, match=r"qwen3 config.json .*attention_bias=True \(supported: False\)"):
        zoo.pretrained.FAMILIES.get("qwen3")().config_from_hf(hf)
    assert zoo.pretrained.FAMILIES.get("qwen3")().config_from_hf(
        {**hf, "attention_bias": False}).head_size == 128
    plain = zoo.build("llama_small", vocab_size=99, d_model=32, n_layers=1, n_heads=4, d_ff=24)
    with pytest.raises(ValueError, match=r"'qwen2': .*model.mixer.qkv_bias=False \(would load as True\)"):
        zoo.save_pretrained(plain, tmp_path / "x", model_type="qwen2")
    with pytest.raises(ValueError, match=r"'qwen3': .*model.mixer.qk_norm=False \(would load as True\)"):
        zoo.save_pretrained(plain, tmp_path / "x", model_type="qwen3")
