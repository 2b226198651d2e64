"""Gemma and Gemma 2 import/export parity against transformers' GemmaForCausalLM / Gemma2ForCausalLM: (1 + w)
RMSNorm, tanh-GeGLU, sqrt(hidden) embedding scale, explicit head size; Gemma 2's sandwich norms, soft caps
(small enough to bite), query_pre_attn_scalar and a sliding window shorter than the sequences."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM, GemmaConfig, GemmaForCausalLM

import zoo
from tests.pretrained.decoder_checks import greedy_matches
from tests.pretrained.helpers import export_round_trip, perturbed, right_padded, saved
from zoo.config import ModelConfig, lay_over
from zoo.pretrained import FAMILIES
from zoo.pretrained.roundtrip import effective

SHAPE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             intermediate_size=40, vocab_size=99, max_position_embeddings=64)
# window 4 < every test sequence; caps 2 and 3 squash scores and logits of this size (see
# test_gemma2_settings_really_act_here); score scale 1/2, not the head size's 1/4
GEMMA2 = dict(num_hidden_layers=3, sliding_window=4, attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
              query_pre_attn_scalar=4)


def tiny_gemma(scale: float = 0.05, **kw):
    return perturbed(GemmaForCausalLM(GemmaConfig(**{**SHAPE, **kw})), scale=scale)


def tiny_gemma2(scale: float = 0.2, **kw):  # larger weights: scores and logits big enough for the caps to act
    return perturbed(Gemma2ForCausalLM(Gemma2Config(**{**SHAPE, **GEMMA2, **kw})), scale=scale)


def logits_match(hf, model, vocab: int = 99) -> None:
    """Right-padded batch (every position), then left-padded with position ids from the mask (real rows)."""
    ids, mask = right_padded(3, 12, vocab, [12, 9, 3])
    for m in (mask, mask.flip(-1)):
        pos = (m.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            ref = hf(input_ids=ids, attention_mask=m, position_ids=pos).logits
            got = model(ids, attention_mask=m, position_ids=pos).logits
        real = m.bool()  # a left-pad query sees no key: zeros in zoo, an average in HF; not compared
        assert (got[real] - ref[real]).abs().max() < 1e-4


def test_gemma_logits_match(tmp_path):
    hf = tiny_gemma()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert ((c.norm, c.activation, c.embed_scale, c.head_size, c.kv_heads)
            == ("rmsnorm_1p", "geglu_tanh", True, 16, 2))
    assert (c.bos_id, c.eos_id, c.pad_id) == (2, 1, 0)
    logits_match(hf, model)


def test_embedding_scale_is_transformers_fp32_sqrt(tmp_path):
    """HF multiplies by torch.tensor(hidden ** 0.5) cast to the table's dtype; zoo by math.sqrt(d_model)."""
    for width in (32, 2048, 2304, 3072, 3584, 4608):
        assert torch.tensor(width**0.5).item() == torch.tensor(math.sqrt(width), dtype=torch.float32).item()
    hf = tiny_gemma()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    ids = torch.randint(0, 99, (2, 7))
    with torch.no_grad():
        assert torch.equal(model.embed(ids, torch.arange(7).expand(2, 7)), hf.model.embed_tokens(ids))


@pytest.mark.parametrize("layer_types", [None, ["sliding_attention", "sliding_attention", "full_attention"]],
                         ids=["alternating", "every_third_global"])
def test_gemma2_logits_match(tmp_path, layer_types):
    hf = tiny_gemma2(layer_types=layer_types)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert (c.norm_placement, c.mixer.softcap, c.head.softcap, c.mixer.scale) == ("sandwich", 2.0, 3.0, 0.5)
    assert (c.mixer.sliding_window, c.layer_pattern.to_data()) == (
        4, ["local", "local", "global"] if layer_types else ["local", "global"])
    assert [c.layer_is_local(i) for i in range(3)] == [t == "sliding_attention"
                                                       for t in hf.config.layer_types]
    logits_match(hf, model)


def test_gemma2_settings_really_act_here(tmp_path):
    """Each Gemma 2 setting changes these tiny models' logits by far more than the tolerance, so the parity
    above does test it."""
    path = saved(tiny_gemma2(), tmp_path)
    ids = torch.randint(3, 99, (2, 12))
    with torch.no_grad():
        logits = zoo.from_pretrained(path)(ids).logits
        for knob in ({"mixer": {"softcap": None}}, {"head": {"softcap": None}},
                     {"mixer": {"sliding_window": None}, "layer_pattern": []}, {"mixer": {"scale": None}}):
            changed = zoo.from_pretrained(path, **knob)
            assert (changed(ids).logits - logits).abs().max() > 0.1, knob
    # an override of one mixer key keeps the others (the window here)
    assert zoo.from_pretrained(path, mixer={"softcap": None}).config.mixer.sliding_window == 4


@pytest.mark.parametrize("family", ["gemma", "gemma2"])
def test_greedy_matches_transformers_generate(tmp_path, family):
    hf = (tiny_gemma if family == "gemma" else tiny_gemma2)(scale=0.3)  # sharp, tie-free next-token choices
    # 6 prompt + 8 new tokens: past the window of 4
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


@pytest.mark.parametrize("family", ["gemma", "gemma2"])
def test_export_round_trip_is_exact_and_loads_in_transformers(tmp_path, family):
    hf_class = GemmaForCausalLM if family == "gemma" else Gemma2ForCausalLM
    hf = (tiny_gemma if family == "gemma" else tiny_gemma2)(tie_word_embeddings=False)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert not model.config.tie_embeddings
    out, hf2 = export_round_trip(model, hf_class, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    if family == "gemma2":
        assert written["layer_types"] == hf.config.layer_types and written["query_pre_attn_scalar"] == 4
    logits_match(hf2, model)


def test_gemma2_preset_exports_and_loads_in_transformers(tmp_path):
    model = zoo.build("gemma2_2b", vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=8,
                      d_ff=24, mixer={"sliding_window": 3, "softcap": 2.0}, head={"softcap": 3.0}).eval()
    out = zoo.save_pretrained(model, tmp_path / "fresh")
    # mixer.scale null: head size
    assert json.loads((out / "config.json").read_text())["query_pre_attn_scalar"] == 8
    logits_match(Gemma2ForCausalLM.from_pretrained(out).eval(), model, vocab=64)


def test_gemma2_without_local_layers_exports(tmp_path):
    """Every layer global: config.json says so in layer_types (transformers still needs some window)."""
    model = zoo.build("gemma2_2b", vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                      d_ff=24, max_seq_len=32, mixer={"sliding_window": None}, layer_pattern=[]).eval()
    out = zoo.save_pretrained(model, tmp_path / "global")
    assert json.loads((out / "config.json").read_text())["layer_types"] == ["full_attention"] * 2
    assert zoo.from_pretrained(out).config.mixer.sliding_window is None
    logits_match(Gemma2ForCausalLM.from_pretrained(out).eval(), model, vocab=64)


def test_published_gemma_2_2b_config_reads_as_the_preset():
    """google/gemma-2-2b's config.json (written by transformers 4.42: both activation keys, an EOS list, no
    layer_types) loads as the gemma2_2b preset."""
    published = {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "attention_bias": False,
                 "attention_dropout": 0.0, "attn_logit_softcapping": 50.0, "bos_token_id": 2,
                 "cache_implementation": "hybrid", "eos_token_id": [1, 107], "final_logit_softcapping": 30.0,
                 "head_dim": 256, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
                 "hidden_size": 2304, "intermediate_size": 9216, "max_position_embeddings": 8192,
                 "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4,
                 "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
                 "rope_theta": 10000.0, "sliding_window": 4096, "vocab_size": 256000}
    preset = ModelConfig.from_dict(zoo.presets.preset_dict("gemma2_2b"))
    assert effective(FAMILIES.get("gemma2")().config_from_hf(published)) == effective(preset)


BASE = {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4, "intermediate_size": 40,
        "vocab_size": 99, "head_dim": 8}


@pytest.mark.parametrize(("model_type", "settings", "message"), [
    ("gemma", {"attention_bias": True}, r"attention_bias=True \(supported: False\)"),
    ("gemma", {"hidden_act": "relu"}, r"hidden_act='relu' \(supported: gelu_pytorch_tanh, gelu\)"),
    ("gemma", {"hidden_activation": "gelu"}, r"hidden_activation='gelu' \(supported: 'gelu_pytorch_tanh'\)"),
    ("gemma", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}},
     r"rope_type='linear' \(supported: default\), rope_parameters.factor=2.0 \(supported: 'absent'\)"),
    ("gemma2", {"use_bidirectional_attention": True},
     r"use_bidirectional_attention=True \(supported: False\)"),
    ("gemma2", {"hidden_activation": "gelu"}, r"hidden_activation='gelu' \(supported: gelu_pytorch_tanh\)"),
    ("gemma2", {"layer_types": ["sliding_attention", "chunked_attention", "full_attention"]},
     r"layer_types in \(sliding_attention, full_attention\)=False"),
    ("gemma2", {"sliding_window": None}, r"sliding_window given for sliding_attention layers=False"),
])
def test_settings_zoo_cannot_reproduce_are_named(model_type, settings, message):
    with pytest.raises(ValueError,
                       match=rf"^{model_type} config.json uses settings zoo does not support: {message}"):
        FAMILIES.get(model_type)().config_from_hf({"model_type": model_type, **BASE, **settings})


@pytest.mark.parametrize(("settings", "window", "pattern"), [
    ({}, 4096, ["local", "global"]),  # transformers' defaults: window 4096, layers 0, 2 local
    ({"layer_types": ["sliding_attention"] * 3, "sliding_window": 5}, 5, []),
    ({"layer_types": ["full_attention"] * 3}, None, []),
    # not every k-th layer global (zoo refused this before model.layer_pattern)
    ({"layer_types": ["full_attention", "sliding_attention", "sliding_attention"]}, 4096,
     {"prefix": ["global"], "cycle": ["local"]}),
    ({"layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}, 4096,
     ["local", "global"]),
    ({"layer_types": ["sliding_attention", "full_attention", "full_attention"]}, 4096,
     {"prefix": ["local"], "cycle": ["global"]}),
])
def test_gemma2_layer_types_map_to_window_and_layer_pattern(settings, window, pattern):
    cfg = FAMILIES.get("gemma2")().config_from_hf({"model_type": "gemma2", **BASE, **settings})
    assert (cfg.mixer.sliding_window, cfg.layer_pattern.to_data()) == (window, pattern)
    types = settings.get("layer_types") or ["sliding_attention", "full_attention", "sliding_attention"]
    assert [cfg.layer_is_local(i) for i in range(3)] == [t == "sliding_attention" for t in types]
    assert FAMILIES.get("gemma2")().config_to_hf(cfg)["layer_types"] == types
    # defaults, head 8
    assert (cfg.mixer.softcap, cfg.head.softcap, cfg.mixer.scale) == (50.0, 30.0, 256**-0.5)


@pytest.mark.parametrize(("model_type", "overrides", "message"), [
    ("gemma", {"mixer": {"qk_norm": True}}, r"model.mixer.qk_norm=True \(would load as False\)"),
    ("gemma", {"norm_placement": "sandwich"}, r"model.norm_placement='sandwich' \(would load as 'pre'\)"),
    ("gemma", {"mixer": {"softcap": 5.0}}, r"model.mixer.softcap=5.0 \(would load as None\)"),
    ("gemma2", {"positional": {"scaling": {"name": "linear", "factor": 2.0}}},
     r"model.positional.scaling='linear' \(would load as 'none'\)"),
    ("gemma2", {"bias": True}, r"model.bias=True \(would load as False\)"),
])
def test_export_names_what_the_family_cannot_express(tmp_path, model_type, overrides, message):
    gemma = {"norm_placement": "pre", "mixer": {"softcap": None, "sliding_window": None},
             "head": {"softcap": None}, "layer_pattern": []} if model_type == "gemma" else {}
    model = zoo.build("gemma2_2b", vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, head_dim=8,
                      d_ff=24, **lay_over(gemma, overrides))
    with pytest.raises(ValueError, match=rf"cannot be exported as '{model_type}'.*{message}"):
        zoo.save_pretrained(model, tmp_path / "x", model_type=model_type)
