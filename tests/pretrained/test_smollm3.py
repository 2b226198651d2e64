"""SmolLM3 (no rotary on every 4th layer, a tied head) import/export parity against transformers'
SmolLM3ForCausalLM, built locally from a tiny config with 4 layers (layer 3 a NoPE layer)."""

from __future__ import annotations

import json

import pytest
from transformers import SmolLM3Config, SmolLM3ForCausalLM

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved
from tests.pretrained.test_qwen import TINY


def tiny(scale: float = 0.05, **kw) -> SmolLM3ForCausalLM:
    return perturbed(SmolLM3ForCausalLM(SmolLM3Config(**{**TINY, "num_hidden_layers": 4, **kw})), scale=scale)


def test_smollm3_logits_match(tmp_path):
    hf = tiny()
    assert hf.config.no_rope_layers == [1, 1, 1, 0]
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert (model.config.layer_pattern.to_data(), model.config.tie_embeddings) == (
        ["rope", "rope", "rope", "nope"], True)
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


def test_smollm3_any_nope_layers_load_and_match(tmp_path):
    """NoPE layers that are not every k-th one (layers 0 and 1 here) load as their own layer pattern, logits
    equal, and export writes the same list back."""
    hf = tiny(no_rope_layers=[0, 0, 1, 1])
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert [c.layer_rotates(i) for i in range(4)] == [False, False, True, True]
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)
    out = export_round_trips(model, SmolLM3ForCausalLM, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["no_rope_layers"] == [0, 0, 1, 1]


def test_smollm3_greedy_matches_transformers_generate(tmp_path):
    hf = tiny(scale=0.3, no_rope_layer_interval=2)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


def test_smollm3_export_round_trip(tmp_path):
    model = zoo.from_pretrained(saved(tiny(no_rope_layer_interval=2, tie_word_embeddings=False), tmp_path))
    assert model.config.layer_pattern.to_data() == ["rope", "nope"]
    out = export_round_trips(model, SmolLM3ForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert (written["model_type"], written["no_rope_layers"]) == ("smollm3", [1, 0, 1, 0])


def test_settings_smollm3_cannot_express_are_named(tmp_path):
    hf = {"model_type": "smollm3", "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4,
          "intermediate_size": 40, "vocab_size": 99, "use_sliding_window": True}
    with pytest.raises(ValueError, match=r"smollm3 config.json uses settings zoo does not support: "
                                         r"use_sliding_window=True \(supported: False\)\.$"):
        zoo.pretrained.FAMILIES.get("smollm3")().config_from_hf(hf)
    nope = zoo.build("llama_small", vocab_size=99, d_model=32, n_layers=2, n_heads=4, d_ff=24,
                     layer_pattern=["rope", "nope"])
    with pytest.raises(ValueError,
                       match=r"'llama': .*model.layer_pattern=\['rope', 'nope'\] \(would load as \[\]\)"):
        zoo.save_pretrained(nope, tmp_path / "x", model_type="llama")


@pytest.mark.parametrize("flags", [[1, 1, 0], [1, 1, 1, 0, 1]])
def test_a_no_rope_list_of_another_length_than_the_layers_is_named(flags):
    """A 3-flag list on 4 layers loaded as the cycle rope, rope, nope (layer 3 rotated, which the file
    did not say; transformers itself fails with an IndexError)."""
    hf = {"model_type": "smollm3", "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4,
          "intermediate_size": 40, "vocab_size": 99, "no_rope_layers": flags}
    with pytest.raises(ValueError,
                       match=r"len\(no_rope_layers\) == num_hidden_layers=False \(supported: True\)"):
        zoo.pretrained.FAMILIES.get("smollm3")().config_from_hf(hf)
