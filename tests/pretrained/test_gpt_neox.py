"""GPT-NeoX (Pythia) import/export parity against transformers' GPTNeoXForCausalLM: per-head fused q/k/v,
partial rotary, parallel and sequential residuals, untied `embed_out`."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

import zoo
from tests.pretrained.decoder_checks import (
    export_round_trips,
    greedy_matches,
    left_padded_logits_match,
    right_padded_logits_match,
)
from tests.pretrained.helpers import perturbed, saved
from zoo.pretrained.tensor_map import blocks_to_heads, heads_to_blocks

GPT_NEOX = zoo.pretrained.FAMILIES.get("gpt_neox")()


def tiny_neox(scale: float = 0.05, **kw):
    cfg = GPTNeoXConfig(**{**dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=40, vocab_size=99, max_position_embeddings=64,
                                  rotary_pct=0.5, rotary_emb_base=500, bos_token_id=1, eos_token_id=2,
                                  pad_token_id=0), **kw})
    return perturbed(GPTNeoXForCausalLM(cfg), scale=scale)


def test_fused_qkv_rows_are_regrouped_from_heads_to_blocks():
    heads, head = 3, 2
    t = torch.arange(3 * heads * head)  # GPT-NeoX rows: (head, q|k|v, feature)
    blocks = heads_to_blocks(t, heads)
    qkv = (torch.arange(3)[:, None, None] * head + torch.arange(heads)[None, :, None] * 3 * head
           + torch.arange(head))
    assert torch.equal(blocks, qkv.flatten())  # [q_0 q_1 q_2 | k_0 k_1 k_2 | v_0 v_1 v_2]
    weight = torch.randn(3 * heads * head, 5)
    assert torch.equal(blocks_to_heads(heads_to_blocks(weight, heads), heads), weight)


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "sequential"])
def test_logits_match_with_right_and_left_padding(tmp_path, parallel):
    hf = tiny_neox(use_parallel_residual=parallel)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    cfg = model.config
    assert ((cfg.norm_placement, cfg.positional.fraction, cfg.positional.base)
            == ("parallel" if parallel else "pre", 0.5, 500.0))
    assert not cfg.tie_embeddings and cfg.activation == "gelu"
    right_padded_logits_match(hf, model)
    left_padded_logits_match(hf, model)


def test_greedy_generation_matches_transformers(tmp_path):
    hf = tiny_neox(scale=0.3)  # larger noise: sharper, less tie-prone next-token distributions
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


@pytest.mark.parametrize("tied", [False, True], ids=["embed_out", "tied"])
def test_export_round_trip_is_exact_and_loads_in_transformers(tmp_path, tied):
    hf = tiny_neox(tie_word_embeddings=tied, hidden_act="gelu_new", use_parallel_residual=not tied)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.tie_embeddings == tied and model.config.activation == "gelu_tanh"
    out = export_round_trips(model, GPTNeoXForCausalLM, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert written["rope_parameters"] == {"rope_type": "default", "rope_theta": 500.0,
                                          "partial_rotary_factor": 0.5}


def test_transformers_4_keys_and_lm_head_name_are_read(tmp_path):
    """4.x config.json keeps `rotary_pct` / `rotary_emb_base` (and maybe `rope_scaling: null`); a head stored
    as `lm_head.weight` (transformers 5's module name) loads like `embed_out.weight`."""
    hf = {"model_type": "gpt_neox", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
          "intermediate_size": 40, "vocab_size": 99, "rotary_pct": 0.25, "rotary_emb_base": 10000,
          "rope_scaling": None, "use_parallel_residual": True}
    cfg = GPT_NEOX.config_from_hf(hf)
    assert ((cfg.positional.fraction, cfg.positional.base, cfg.norm_placement, cfg.tie_embeddings)
            == (0.25, 10000.0, "parallel", False))
    hf_model = tiny_neox()
    model = zoo.from_pretrained(saved(hf_model, tmp_path))
    state = GPT_NEOX.state_to_hf(model.state_dict(), model.config)
    state["lm_head.weight"] = state.pop("embed_out.weight")
    # old buffers
    state.update({f"gpt_neox.layers.0.attention.{b}": torch.zeros(1) for b in ("bias", "masked_bias")})
    src = zoo.pretrained.family.HFTensors(state, "test", GPT_NEOX.prefixes)
    back = GPT_NEOX.state_from_hf(src, model.config)
    assert all(torch.equal(back[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize(("change", "message"), [
    ({"attention_bias": False}, r"attention_bias=False \(supported: True\)"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}},
     r"rope_type='linear' \(supported: default\), rope_parameters.factor=2.0 \(supported: 'absent'\)"),
    ({"hidden_act": "gelu_fast"}, r"gpt_neox config.json .*hidden_act='gelu_fast' \(supported: gelu, "),
])
def test_settings_zoo_cannot_reproduce_are_named(change, message):
    hf = {"model_type": "gpt_neox", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
          "intermediate_size": 40, "vocab_size": 99, **change}
    with pytest.raises(ValueError, match=message):
        GPT_NEOX.config_from_hf(hf)


def test_pythia_preset_exports_and_other_models_do_not(tmp_path):
    model = zoo.build("pythia_70m", vocab_size=64, d_model=32, n_layers=1, n_heads=4, d_ff=24).eval()
    hf = GPTNeoXForCausalLM.from_pretrained(zoo.save_pretrained(model, tmp_path / "fresh",
                                                                model_type="gpt_neox"))
    right_padded_logits_match(hf.eval(), model, vocab=64)
    llama = zoo.build("llama_small", vocab_size=64, d_model=32, n_layers=1, n_heads=4, d_ff=24)
    with pytest.raises(ValueError, match=r"'gpt_neox'.*model.norm='rmsnorm' \(would load as 'layernorm'\)"):
        zoo.save_pretrained(llama, tmp_path / "x", model_type="gpt_neox")
