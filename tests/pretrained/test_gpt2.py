"""GPT-2 import/export parity against transformers' GPT2LMHeadModel built from a tiny random config."""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel

import zoo
from tests.pretrained.helpers import export_round_trip, perturbed, right_padded, saved


def tiny_gpt2(**kw):
    cfg = GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=64, bos_token_id=1,
                     eos_token_id=2, **kw)
    return perturbed(GPT2LMHeadModel(cfg))


def test_logits_match_with_right_padding(tmp_path):
    hf = tiny_gpt2()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    ids, mask = right_padded(3, 12, 99, [12, 7, 4])
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).logits
        got = model(ids, attention_mask=mask).logits
    real = mask.bool()  # causal + right padding: every real position sees exactly the same keys
    assert (got[real] - ref[real]).abs().max() < 1e-4


def test_logits_match_with_left_padding_and_positions(tmp_path):
    hf = tiny_gpt2()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    ids, mask = right_padded(2, 10, 99, [10, 6], seed=1)
    mask = mask.flip(-1)  # left padding
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        got = model(ids, attention_mask=mask, position_ids=pos).logits
    # Pad rows see no key at all: zoo outputs zeros there, HF a uniform average; only real rows are defined.
    real = mask.bool()
    assert (got[real] - ref[real]).abs().max() < 1e-4


def test_untied_head_and_custom_inner(tmp_path):
    hf = tiny_gpt2(tie_word_embeddings=False, n_inner=48, activation_function="relu")
    model = zoo.from_pretrained(saved(hf, tmp_path))
    assert model.config.d_ff == 48 and model.config.activation == "relu" and not model.config.tie_embeddings
    ids = torch.randint(0, 99, (2, 9))
    with torch.no_grad():
        assert (model(ids).logits - hf(input_ids=ids).logits).abs().max() < 1e-4


def test_export_round_trip_is_exact_and_loads_in_transformers(tmp_path):
    hf = tiny_gpt2()
    model = zoo.from_pretrained(saved(hf, tmp_path))
    _, hf2 = export_round_trip(model, GPT2LMHeadModel, tmp_path / "export")
    ids = torch.randint(0, 99, (2, 11))
    with torch.no_grad():
        assert (hf2(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4


def test_zoo_built_model_exports_as_gpt2(tmp_path):
    model = zoo.build("gpt2", vocab_size=64, d_model=32, n_layers=1, n_heads=4, max_seq_len=32, dropout=0.0,
                      pad_id=0, bos_id=1, eos_id=2).eval()
    out = zoo.save_pretrained(model, tmp_path / "fresh")  # family found by its knobs
    hf = GPT2LMHeadModel.from_pretrained(out).eval()
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        assert (hf(input_ids=ids).logits - model(ids).logits).abs().max() < 1e-4
