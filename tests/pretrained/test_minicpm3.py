"""MiniCPM3 (minicpm3) import/export parity against transformers built from small configs, every weight
perturbed: latent attention with a low-rank or full-rank query, rope rotate-half, plain or LongRoPE, and its
three scalings (scale_emb -> model.embed_multiplier, scale_depth -> model.depth_scale, dim_model_base ->
model.head.scale); logits within 1e-4 on right- and left-padded batches, greedy tokens equal (forward loop and
the latent KV cache), the export read back by transformers with equal logits; the classifier class; what zoo
cannot reproduce named."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import MiniCPM3Config, MiniCPM3ForCausalLM, MiniCPM3ForSequenceClassification

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, right_padded, saved

BASE = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
            intermediate_size=40, vocab_size=99, q_lora_rank=12, kv_lora_rank=16, qk_nope_head_dim=8,
            qk_rope_head_dim=4, v_head_dim=6, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, scale_emb=3.0, scale_depth=1.4, dim_model_base=8)
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 64,
            "short_factor": [1.0, 1.5], "long_factor": [2.0, 3.0]}
VARIANTS = {
    "low_rank_q_tied": {},
    "full_q_untied": dict(q_lora_rank=None, tie_word_embeddings=False, scale_emb=12, dim_model_base=32),
    "longrope": dict(rope_parameters=LONGROPE),
}


def tiny(variant: str, scale: float = 0.05, cls=MiniCPM3ForCausalLM, **more):
    return perturbed(cls(MiniCPM3Config(**{**BASE, **VARIANTS[variant], **more})), scale=scale)


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_match_on_padded_batches(tmp_path, variant):
    hf = tiny(variant)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    cfg = model.config
    settings = {**BASE, **VARIANTS[variant]}
    assert (cfg.mixer.name, cfg.positional.layout) == ("mla", "half")
    assert (cfg.embed_multiplier, cfg.depth_scale) == (settings["scale_emb"], 1.4)
    assert cfg.head.scale == (None if settings["dim_model_base"] == 32 else settings["dim_model_base"] / 32)
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


@pytest.mark.parametrize("variant", ["low_rank_q_tied", "longrope"])
def test_greedy_matches_transformers_generate(tmp_path, variant):
    hf = tiny(variant, scale=0.3)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


@pytest.mark.parametrize("variant", VARIANTS)
def test_export_round_trip(tmp_path, variant):
    model = zoo.from_pretrained(saved(tiny(variant), tmp_path))
    out = export_round_trips(model, MiniCPM3ForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    settings = {**BASE, **VARIANTS[variant]}
    assert (written["scale_emb"], written["scale_depth"]) == (settings["scale_emb"], 1.4)
    assert written["dim_model_base"] == settings["dim_model_base"]


def test_the_classifier_class_loads_without_the_lm_scaling(tmp_path):
    """MiniCPM3ForSequenceClassification pools the last real token (the last id that is not the pad id) and
    scores it without dim_model_base's scaling, as zoo's classifier head."""
    hf = tiny("low_rank_q_tied", cls=MiniCPM3ForSequenceClassification, num_labels=3)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.head.name == "classifier" and not hasattr(model.config.head, "scale")
    ids, mask = right_padded(3, 9, 99, [9, 6, 3])
    ids = ids.masked_fill(mask == 0, 0)  # transformers finds the last real token by the pad id
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).logits
        got = model(ids, attention_mask=mask).logits
    assert (got - ref).abs().max() < 1e-4


def test_settings_zoo_cannot_reproduce_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"minicpm3 config.json uses settings zoo does not support: "
                                         r"mlp_bias=True"):
        zoo.from_pretrained(saved(tiny("low_rank_q_tied", mlp_bias=True), tmp_path))
