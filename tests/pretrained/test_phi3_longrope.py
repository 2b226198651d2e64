"""LongRoPE (Phi-3 128k, Phi-3.5, Phi-4-mini) through the phi3 family against transformers' Phi3ForCausalLM:
logits in the short regime (sequence within original_max_position_embeddings) and the long one, greedy
tokens, export back into transformers, Phi-4-mini's 4.x config.json spelling, and what is refused."""

from __future__ import annotations

import json

import pytest
import torch
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
from zoo.generation import generate

SHORT = [1.0, 1.3, 1.7, 2.0, 2.5, 3.0]  # one per rotated pair: head 16, 12 of 16 rotate
LONG = [1.5, 2.5, 4.0, 6.0, 9.0, 16.0]
PARAMS = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
          "short_factor": SHORT, "long_factor": LONG}


def tiny_longrope(original: int, scale: float = 0.05, **kw):
    """Phi-4-mini's shape in small: tied head, 3/4 rotary, LongRoPE from `original` to 128 positions."""
    return tiny_phi3(scale=scale, **{**dict(sliding_window=None, tie_word_embeddings=True, hidden_size=64,
                                            num_attention_heads=4, num_key_value_heads=2,
                                            max_position_embeddings=128, rope_parameters=dict(PARAMS),
                                            original_max_position_embeddings=original), **kw})


@pytest.mark.parametrize("original", [64, 8], ids=["short", "long"])  # the batches hold 10 and 12 tokens
def test_longrope_logits_match_in_both_regimes(tmp_path, original):
    hf = tiny_longrope(original)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    scaling = c.positional.scaling
    assert (scaling.name, scaling.original_max_len, scaling.short_factor, scaling.long_factor,
            c.max_seq_len) == ("longrope", original, tuple(SHORT), tuple(LONG), 128)
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


def test_the_regime_follows_the_sequence_length(tmp_path):
    """Not vacuous: with original 8, the first 8 positions of a 9-token forward (long factors) differ from an
    8-token forward (short), in zoo as in transformers."""
    hf = tiny_longrope(8)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    ids = torch.randint(3, 99, (1, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for length in (8, 9):
            assert (model(ids[:, :length]).logits - hf(ids[:, :length]).logits).abs().max() < 1e-4
        change = (model(ids).logits[:, :8] - model(ids[:, :8]).logits).abs().max()
    assert change > 1e-3


@pytest.mark.parametrize("original", [64, 8, 4], ids=["short", "crossing", "long"])  # prompt 6, 8 new
def test_longrope_greedy_matches_transformers_generate(tmp_path, original):
    """Crossing: the cache written under the short factors is re-run once under the long ones at 9 tokens, as
    transformers' Phi-3 does (zoo's stepper asks the scheme's `stale_after`)."""
    hf = tiny_longrope(original, scale=0.3)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


def test_a_static_cache_or_speculative_run_across_the_switch_is_refused(tmp_path):
    model = zoo.from_pretrained(saved(tiny_longrope(8), tmp_path))
    ids = torch.randint(3, 99, (1, 6))
    with pytest.raises(ValueError, match=r"changes its frequencies once the sequence passes "
                                         r"model.positional.scaling.original_max_len=8 \(prompt 6 \+ "
                                         r"max_new_tokens 4"):
        generate(model, ids, max_new_tokens=4, cache_implementation="static")
    assert generate(model, ids, max_new_tokens=2, cache_implementation="static").shape == (1, 8)
    with pytest.raises(ValueError, match=r"the target's model.positional.scaling=longrope changes its "
                                         r"frequencies past model.positional.scaling.original_max_len=8 "
                                         r"positions"):
        generate(model, ids, max_new_tokens=4, assistant_model=model)


def test_longrope_exports_to_phi3(tmp_path):
    hf = tiny_longrope(8)
    out = export_round_trips(zoo.from_pretrained(saved(hf, tmp_path)), Phi3ForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    rope = written["rope_parameters"]
    assert (rope["rope_type"], rope["short_factor"], rope["long_factor"]) == ("longrope", SHORT, LONG)
    assert written["original_max_position_embeddings"] == rope["original_max_position_embeddings"] == 8


@pytest.mark.parametrize("rope_type", ["longrope", "su"])
def test_phi4_mini_config_spelling_loads(tmp_path, rope_type):
    """Phi-4-mini's config.json (transformers 4.x): `rope_scaling` holds the type and both factor lists, the
    original length, base and rotary share are top-level keys."""
    hf = tiny_longrope(8)
    path = saved(hf, tmp_path)
    written = json.loads((path / "config.json").read_text())
    del written["rope_parameters"]
    written.update(rope_scaling={"type": rope_type, "short_factor": SHORT, "long_factor": LONG},
                   rope_theta=10000.0, partial_rotary_factor=0.75, original_max_position_embeddings=8)
    (path / "config.json").write_text(json.dumps(written))
    model = zoo.from_pretrained(path)
    scaling = model.config.positional.scaling
    assert (scaling.name, scaling.original_max_len) == ("longrope", 8)
    right_padded_logits_match(hf, model)


def test_longrope_settings_zoo_does_not_compute_are_named(tmp_path):
    """An explicit `factor` or `attention_factor` (transformers' overrides of max/original) is refused."""
    hf = tiny_longrope(8)
    hf.config.rope_parameters["attention_factor"] = 1.5
    with pytest.raises(ValueError, match=r"rope_parameters.attention_factor=1.5 \(supported: None\)"):
        zoo.from_pretrained(saved(hf, tmp_path))


def test_a_zoo_model_with_longrope_exports_as_phi3(tmp_path):
    """Llama's family has no LongRoPE: export picks phi3, and transformers agrees in the long regime."""
    model = zoo.build("llama_small", vocab_size=99, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=24,
                      max_seq_len=64, positional={"scaling": {
                          "name": "longrope", "original_max_len": 8, "short_factor": [1.0, 2.0, 3.0, 4.0],
                          "long_factor": [2.0, 3.0, 4.0, 5.0]}}).eval()
    out = zoo.save_pretrained(model, tmp_path / "fresh")
    assert json.loads((out / "config.json").read_text())["model_type"] == "phi3"
    right_padded_logits_match(Phi3ForCausalLM.from_pretrained(out).eval(), model)  # 12 tokens > 8
