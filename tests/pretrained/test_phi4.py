"""Phi-4 and Phi-4-mini are `phi3` checkpoints: the phi3 family loads their shapes (Phi-4: full rotary, base
250000, untied; Phi-4-mini: rotary on 3/4 of each head, a tied head) with transformers' logits, greedy tokens
and export; Phi-4-mini's LongRoPE loads (positional.scaling=longrope,
tests/pretrained/test_phi3_longrope.py)."""

from __future__ import annotations

import json

import pytest
from transformers import Phi3ForCausalLM

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import saved
from tests.pretrained.test_phi3 import tiny_phi3

MINI = dict(sliding_window=None, tie_word_embeddings=True, num_attention_heads=4, num_key_value_heads=2,
            hidden_size=64, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                             "partial_rotary_factor": 0.75})  # head 16: 12 of 16 rotate
PHI4 = dict(sliding_window=None, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 250000.0})


@pytest.mark.parametrize("shape", [MINI, PHI4], ids=["phi4_mini", "phi4"])
def test_phi4_shapes_load_generate_and_export(tmp_path, shape):
    hf = tiny_phi3(**shape)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert (c.tie_embeddings, c.positional.fraction) == (
        shape["tie_word_embeddings"], shape["rope_parameters"].get("partial_rotary_factor", 1.0))
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)
    sharp = tiny_phi3(scale=0.3, **shape)  # larger weights: distinct greedy choices
    greedy_matches(sharp, zoo.from_pretrained(saved(sharp, tmp_path / "greedy")))
    out = export_round_trips(model, Phi3ForCausalLM, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["model_type"] == "phi3"


def test_phi4_mini_longrope_loads(tmp_path):
    """Phi-4-mini's config.json: LongRoPE factors per rotated pair (6 here), original 32 -> 128 here (4096 ->
    131072 in the real one); more in test_phi3_longrope.py."""
    long = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
            "short_factor": [1.0] * 6, "long_factor": [2.0] * 6}
    hf = tiny_phi3(**{**MINI, "rope_parameters": long, "max_position_embeddings": 128,
                      "original_max_position_embeddings": 32})
    model = zoo.from_pretrained(saved(hf, tmp_path))
    scaling = model.config.positional.scaling
    assert (scaling.name, scaling.original_max_len) == ("longrope", 32)
    right_padded_logits_match(hf, model)
