"""Llama import/export parity (GQA, RoPE, SwiGLU, RMSNorm) against transformers' LlamaForCausalLM."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import zoo
from tests.pretrained.helpers import perturbed, right_padded, saved


def tiny_llama(**kw):
    cfg = LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=40, vocab_size=99, max_position_embeddings=64, rope_theta=500.0, **kw)
    return perturbed(LlamaForCausalLM(cfg))


def test_gqa_logits_match_with_right_padding(tmp_path):
    hf = tiny_llama()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.kv_heads == 2 and model.config.rope_base == 500.0 and model.config.activation == "swiglu"
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
    out = zoo.save_pretrained(model, tmp_path / "export")
    again = zoo.from_pretrained(out)
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    hf2 = LlamaForCausalLM.from_pretrained(out).eval()
    ids = torch.randint(0, 99, (2, 10))
    with torch.no_grad():
        assert (hf2(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4


def test_zoo_llama_preset_exports(tmp_path):
    model = zoo.build("llama_small", vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=1, d_ff=24).eval()
    hf = LlamaForCausalLM.from_pretrained(zoo.save_pretrained(model, tmp_path / "fresh")).eval()
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        assert (hf(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4
