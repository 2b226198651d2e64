"""Phi-3 import/export parity against transformers' Phi3ForCausalLM: fused qkv_proj / gate_up_proj, partial
rotary (partial_rotary_factor -> positional.fraction) and a sliding window (4) shorter than the sequences."""

from __future__ import annotations

import json

import pytest
from transformers import Phi3Config, Phi3ForCausalLM

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved


def tiny_phi3(scale: float = 0.05, **kw):
    cfg = Phi3Config(**{**dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2,
                               intermediate_size=40, vocab_size=99, max_position_embeddings=64,
                               sliding_window=4,
                               rope_parameters={"rope_type": "default", "rope_theta": 500.0,
                                                "partial_rotary_factor": 0.5},
                               pad_token_id=0, bos_token_id=1, eos_token_id=2), **kw})
    return perturbed(Phi3ForCausalLM(cfg), scale=scale)


def test_fused_partial_rotary_windowed_logits_match(tmp_path):
    hf = tiny_phi3()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert ((c.positional.fraction, c.mixer.sliding_window, c.positional.base, c.bias, c.kv_heads)
            == (0.5, 4, 500.0, False, 2))
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


def test_greedy_matches_transformers_generate(tmp_path):
    hf = tiny_phi3(scale=0.3)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


def test_export_round_trip_full_rotary_no_window(tmp_path):
    hf = tiny_phi3(sliding_window=None, tie_word_embeddings=True,
                   rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert (model.config.positional.fraction, model.config.mixer.sliding_window) == (1.0, None)
    right_padded_logits_match(hf, model)
    export_round_trips(model, Phi3ForCausalLM, tmp_path / "export")


def test_zoo_model_with_partial_rotary_exports_as_phi3(tmp_path):
    model = zoo.build("llama_small", vocab_size=99, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=24,
                      positional={"fraction": 0.5}).eval()
    out = zoo.save_pretrained(model, tmp_path / "fresh")  # llama rotates every feature: phi3 is chosen
    written = json.loads((out / "config.json").read_text())
    assert written["model_type"] == "phi3" and written["rope_parameters"]["partial_rotary_factor"] == 0.5
    right_padded_logits_match(Phi3ForCausalLM.from_pretrained(out).eval(), model)


def test_settings_phi3_cannot_express_are_named(tmp_path):
    hf = {"model_type": "phi3", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
          "intermediate_size": 40, "vocab_size": 99,
          "rope_scaling": {"type": "dynamic", "factor": 2.0}}  # longrope ("su"): test_phi3_longrope.py
    with pytest.raises(ValueError, match=r"phi3 config.json .*rope_type='dynamic' "
                                         r"\(supported: default, su, yarn, longrope\)"):
        zoo.pretrained.FAMILIES.get("phi3")().config_from_hf(hf)
    scaled = zoo.build("llama_small", vocab_size=99, d_model=32, n_layers=1, n_heads=4, d_ff=24,
                       positional={"scaling": {"name": "linear", "factor": 2.0}})
    with pytest.raises(ValueError, match=r"'phi3': .*model.positional.scaling='linear' \(would load as "
                                         r"'none'\)"):
        zoo.save_pretrained(scaled, tmp_path / "x", model_type="phi3")
