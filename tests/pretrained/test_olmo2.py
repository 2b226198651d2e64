"""OLMo 2 (norms on each sub-layer's output inside the residual, q/k RMSNorm over the whole projections)
import/export parity against transformers' Olmo2ForCausalLM, built locally from a tiny config."""

from __future__ import annotations

import json

import pytest
from transformers import Olmo2Config, Olmo2ForCausalLM

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved
from tests.pretrained.test_qwen import TINY


def tiny(scale: float = 0.05, **kw) -> Olmo2ForCausalLM:
    return perturbed(Olmo2ForCausalLM(Olmo2Config(**{**TINY, **kw})), scale=scale)


def test_olmo2_logits_match(tmp_path):
    hf = tiny()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    c = model.config
    assert ((c.norm_placement, c.mixer.qk_norm, c.mixer.qk_norm_scope, c.bias)
            == ("post_sublayer", True, "all", False))
    layer = model.decoder_stack.layers[0]
    assert (layer.self_attn.q_norm.weight.shape, layer.self_attn.k_norm.weight.shape) == ((32,), (16,))
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


def test_olmo2_greedy_matches_transformers_generate(tmp_path):
    hf = tiny(scale=0.3)
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


def test_olmo2_export_round_trip(tmp_path):
    model = zoo.from_pretrained(saved(tiny(tie_word_embeddings=True), tmp_path))
    out = export_round_trips(model, Olmo2ForCausalLM, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["model_type"] == "olmo2"


def test_settings_olmo2_cannot_express_are_named(tmp_path):
    hf = {"model_type": "olmo2", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
          "intermediate_size": 40, "vocab_size": 99, "attention_bias": True,
          "rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}
    with pytest.raises(ValueError, match=r"olmo2 config.json uses settings zoo does not support: "
                                         r"attention_bias=True \(supported: False\), rope_type='longrope'"):
        zoo.pretrained.FAMILIES.get("olmo2")().config_from_hf(hf)
    per_head = zoo.build("llama_small", vocab_size=99, d_model=32, n_layers=1, n_heads=4, d_ff=24,
                         mixer={"qk_norm": True})
    with pytest.raises(ValueError, match=r"'olmo2': .*model.mixer.qk_norm_scope='head' \(would load as "
                                         r"'all'\); "
                                         r"model.norm_placement='pre' \(would load as 'post_sublayer'\)"):
        zoo.save_pretrained(per_head, tmp_path / "x", model_type="olmo2")


def test_qk_norm_scope_without_qk_norm_exports_as_llama(tmp_path):
    """mixer.qk_norm_scope says nothing without mixer.qk_norm: the round trip does not count it as lost."""
    model = zoo.build("llama_small", vocab_size=99, d_model=32, n_layers=1, n_heads=4, d_ff=24,
                      mixer={"qk_norm_scope": "all"})
    out = zoo.save_pretrained(model, tmp_path / "x")
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"
