"""Llama 3.2 is a `llama` checkpoint with llama3 RoPE scaling and a tied head: its shape (scaled down) loads
with transformers' logits on right- and left-padded batches, greedy tokens, and an export that
LlamaForCausalLM reads back equal."""

from __future__ import annotations

import json

from transformers import LlamaForCausalLM

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved
from tests.pretrained.test_llama import ROPE_SCALINGS, tiny_llama

PARAMS, KEYS = ROPE_SCALINGS["llama3"]  # factor 8 from 64 tokens (Llama 3.2: 32 from 8192)
LLAMA32 = dict(tie_word_embeddings=True, head_dim=8, rope_parameters={"rope_type": "llama3",
                                                                      "rope_theta": 500.0, **PARAMS})


def test_llama32_shape_loads_generates_and_exports(tmp_path):
    hf = tiny_llama(**LLAMA32)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert (c.tie_embeddings, c.positional.scaling.name) == (True, "llama3")
    assert {k: getattr(c.positional.scaling, k) for k in KEYS} == KEYS
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)
    sharp = perturbed(tiny_llama(**LLAMA32), scale=0.3)  # larger weights: distinct greedy choices
    greedy_matches(sharp, zoo.from_pretrained(saved(sharp, tmp_path / "greedy")))
    out = export_round_trips(model, LlamaForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert (written["model_type"], written["tie_word_embeddings"]) == ("llama", True)
