"""Mistral import/export parity against transformers' MistralForCausalLM: a sliding window (4) shorter than
the sequences (10-14 tokens), so the band decides the logits and the generated tokens."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved

WINDOW = 4


def tiny_mistral(scale: float = 0.05, **kw):
    cfg = MistralConfig(**{**dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, intermediate_size=40, vocab_size=99,
                                  max_position_embeddings=64, rope_theta=500.0, sliding_window=WINDOW,
                                  pad_token_id=0, bos_token_id=1, eos_token_id=2), **kw})
    return perturbed(MistralForCausalLM(cfg), scale=scale)


def test_sliding_window_logits_match_and_the_band_matters(tmp_path):
    hf = tiny_mistral()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert ((c.mixer.sliding_window, c.layer_pattern.to_data(), c.bias, c.kv_heads, c.positional.base)
            == (WINDOW, [], False, 2, 500.0))
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)
    # same weights, no band
    full = zoo.from_pretrained(saved(hf, tmp_path, "hf_copy"), mixer={"sliding_window": None})
    ids = torch.randint(3, 99, (1, 12))
    with torch.no_grad():
        assert (full(ids).logits[0, WINDOW:] - model(ids).logits[0, WINDOW:]).abs().max() > 1e-3


def test_greedy_matches_transformers_generate(tmp_path):
    hf = tiny_mistral(scale=0.3)  # larger noise: sharper, less tie-prone next-token distributions
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


def test_export_round_trip_and_null_window(tmp_path):
    hf = tiny_mistral(sliding_window=None, tie_word_embeddings=True)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.mixer.sliding_window is None and model.config.tie_embeddings
    out = export_round_trips(model, MistralForCausalLM, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["sliding_window"] is None


def test_zoo_model_with_a_window_on_every_layer_exports_as_mistral(tmp_path):
    model = zoo.build("llama_small", vocab_size=99, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24,
                      mixer={"sliding_window": WINDOW}).eval()
    out = zoo.save_pretrained(model, tmp_path / "fresh")  # llama cannot keep the window: mistral is chosen
    written = json.loads((out / "config.json").read_text())
    assert (written["model_type"], written["sliding_window"]) == ("mistral", WINDOW)
    right_padded_logits_match(MistralForCausalLM.from_pretrained(out).eval(), model)


def test_settings_mistral_cannot_express_are_named(tmp_path):
    model = zoo.build("llama_small", vocab_size=99, d_model=32, n_layers=2, n_heads=4, d_ff=24,
                      mixer={"sliding_window": 4}, layer_pattern=["local", "global"], bias=True)
    with pytest.raises(ValueError, match=r"'mistral': its config.json cannot express model.mixer.qkv_bias="
                                         r"True \(would load as False\); model.layer_pattern=\['local', "
                                         r"'global'\] \(would load as \[\]\); model.bias=True \(would load "
                                         r"as False\)"):
        zoo.save_pretrained(model, tmp_path / "x", model_type="mistral")
    hf = {"model_type": "mistral", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
          "intermediate_size": 40, "vocab_size": 99, "hidden_act": "relu",
          "rope_parameters": {"rope_type": "dynamic", "rope_theta": 500.0, "factor": 2.0}}
    with pytest.raises(ValueError, match=r"mistral config.json .*rope_type='dynamic' \(supported: default, "
                                         r"linear, llama3, yarn\)"):
        zoo.pretrained.FAMILIES.get("mistral")().config_from_hf(hf)
    hf["rope_parameters"]["rope_type"] = "linear"
    with pytest.raises(ValueError, match=r"mistral config.json .*hidden_act='relu' \(supported: silu, gelu, "
                                         r"gelu_pytorch_tanh\)"):
        zoo.pretrained.FAMILIES.get("mistral")().config_from_hf(hf)
