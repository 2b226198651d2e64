"""Llama import/export parity (GQA, RoPE, SwiGLU, RMSNorm) against transformers' LlamaForCausalLM."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import zoo
from tests.pretrained.decoder_checks import right_padded_logits_match
from tests.pretrained.helpers import export_round_trip, perturbed, right_padded, saved


def tiny_llama(**kw):
    cfg = LlamaConfig(**{**dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, intermediate_size=40, vocab_size=99,
                                max_position_embeddings=64, rope_theta=500.0), **kw})
    return perturbed(LlamaForCausalLM(cfg))


def test_gqa_logits_match_with_right_padding(tmp_path):
    hf = tiny_llama()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert (model.config.kv_heads == 2 and model.config.positional.base == 500.0
            and model.config.activation == "swiglu")
    ids, mask = right_padded(3, 12, 99, [12, 9, 3])
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).logits
        got = model(ids, attention_mask=mask).logits
    real = mask.bool()
    assert (got[real] - ref[real]).abs().max() < 1e-4


def test_left_padding_with_positions(tmp_path):
    hf = tiny_llama()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    ids, mask = right_padded(2, 10, 99, [10, 4], seed=3)
    mask = mask.flip(-1)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        got = model(ids, attention_mask=mask, position_ids=pos).logits
    real = mask.bool()  # fully masked pad rows are zeros in zoo and an average in HF: undefined, not compared
    assert (got[real] - ref[real]).abs().max() < 1e-4


def test_export_round_trip_is_exact_and_loads_in_transformers(tmp_path):
    hf = tiny_llama(tie_word_embeddings=True)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.tie_embeddings
    _, hf2 = export_round_trip(model, LlamaForCausalLM, tmp_path / "export")
    ids = torch.randint(0, 99, (2, 10))
    with torch.no_grad():
        assert (hf2(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4


def test_zoo_llama_preset_exports(tmp_path):
    model = zoo.build("llama_small", vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=1,
                      d_ff=24).eval()
    hf = LlamaForCausalLM.from_pretrained(zoo.save_pretrained(model, tmp_path / "fresh")).eval()
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        assert (hf(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4


# transformers rope_parameters -> the model.positional.scaling keys they map to. head 8, theta 500:
# wavelengths 6.3, 30, 140, 664, so llama3 with original 64 keeps one pair (< 16), blends one and divides
# two (> 64)
ROPE_SCALINGS = {
    "linear": ({"factor": 4.0}, {"factor": 4.0}),
    "llama3": ({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64},
               {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_len": 64}),
    "yarn": ({"factor": 4.0, "original_max_position_embeddings": 16},
             {"factor": 4.0, "original_max_len": 16}),
}


@pytest.mark.parametrize("rope_type", sorted(ROPE_SCALINGS))
def test_rope_scaling_maps_and_logits_match(tmp_path, rope_type):
    params, keys = ROPE_SCALINGS[rope_type]
    hf = tiny_llama(rope_parameters={"rope_type": rope_type, "rope_theta": 500.0, **params})
    model = zoo.from_pretrained(saved(hf, tmp_path))
    scaling = model.config.positional.scaling
    assert scaling.name == rope_type and model.config.positional.base == 500.0
    assert {k: getattr(scaling, k) for k in keys} == keys
    right_padded_logits_match(hf, model)
    with torch.no_grad():  # the scaling is not a no-op here: without it the logits differ
        plain = zoo.from_pretrained(saved(tiny_llama(), tmp_path, "plain"))
        plain.load_state_dict(model.state_dict())
        ids = torch.randint(3, 99, (1, 12))
        assert (plain(ids).logits - model(ids).logits).abs().max() > 1e-3


def test_transformers_4_rope_scaling_key_is_read():
    """Checkpoints written by transformers 4.x keep `rope_theta` apart and the scaling in `rope_scaling`."""
    hf = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
          "intermediate_size": 40, "vocab_size": 99, "rope_theta": 500000.0,
          "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    cfg = zoo.pretrained.FAMILIES.get("llama")().config_from_hf(hf)
    rope = cfg.positional
    assert ((rope.base, rope.scaling.name, rope.scaling.factor, rope.scaling.original_max_len)
            == (500000.0, "llama3", 8.0, 8192))


@pytest.mark.parametrize(("rope_parameters", "message"), [
    ({"rope_type": "dynamic", "factor": 2.0}, r"rope_type='dynamic' \(supported: default, linear, llama3, "),
    ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16, "beta_fast": 16},
     r"rope_parameters.beta_fast=16 \(supported: 32\)"),
    ({"rope_type": "default", "partial_rotary_factor": 0.5},
     r"rope_parameters.partial_rotary_factor=0.5 \(supported: 1.0\)"),
    ({"rope_type": "linear"}, r"rope_parameters.factor given=False"),
])
def test_rope_settings_zoo_cannot_reproduce_are_named(rope_parameters, message):
    hf = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
          "intermediate_size": 40, "vocab_size": 99,
          "rope_parameters": {"rope_theta": 500.0, **rope_parameters}}
    with pytest.raises(ValueError, match=message):
        zoo.pretrained.FAMILIES.get("llama")().config_from_hf(hf)


def test_head_dim_and_gelu_tanh_gate_match(tmp_path):
    hf = tiny_llama(head_dim=16, hidden_act="gelu_pytorch_tanh")
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert (model.config.head_dim, model.config.head_size, model.config.activation) == (16, 16, "geglu_tanh")
    right_padded_logits_match(hf, model)


def test_llama3_scaled_export_round_trips_through_transformers(tmp_path):
    params, keys = ROPE_SCALINGS["llama3"]
    hf = tiny_llama(rope_parameters={"rope_type": "llama3", "rope_theta": 500.0, **params}, head_dim=16)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    out = zoo.save_pretrained(model, tmp_path / "export")
    written = json.loads((out / "config.json").read_text())
    assert written["rope_parameters"] == {"rope_type": "llama3", "rope_theta": 500.0, **params}
    assert written["head_dim"] == 16
    assert zoo.from_pretrained(out).config == model.config
    hf2 = LlamaForCausalLM.from_pretrained(out).eval()
    right_padded_logits_match(hf2, model)


def test_partial_rotary_does_not_export_as_llama(tmp_path):
    model = zoo.build("llama_small", vocab_size=64, d_model=32, n_layers=1, n_heads=4, d_ff=24,
                      positional={"fraction": 0.5})
    with pytest.raises(ValueError, match=r"'llama': .*model.positional.fraction=0.5 \(would load as 1.0\)"):
        zoo.save_pretrained(model, tmp_path / "x", model_type="llama")  # chosen by its knobs, it is a phi3


def test_tied_file_holding_only_lm_head_loads_as_in_transformers(tmp_path):
    """transformers loads a tied checkpoint from either tensor of the pair; one that stores only
    lm_head.weight (no model.embed_tokens.weight) gives zoo the same logits."""
    from safetensors.torch import load_file, save_file

    folder = saved(tiny_llama(tie_word_embeddings=True), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    table = tensors.pop("model.embed_tokens.weight")
    tensors["lm_head.weight"] = tensors.get("lm_head.weight", table)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    assert "model.embed_tokens.weight" not in load_file(folder / "model.safetensors")
    hf = LlamaForCausalLM.from_pretrained(folder).eval()
    assert torch.equal(hf.model.embed_tokens.weight, table)  # transformers ties the table to the stored head
    model = zoo.from_pretrained(folder)
    ids, mask = right_padded(3, 12, 99, [12, 9, 3])
    with torch.no_grad():
        ref, got = hf(input_ids=ids, attention_mask=mask).logits, model(ids, attention_mask=mask).logits
    assert (got[mask.bool()] - ref[mask.bool()]).abs().max() < 1e-4
