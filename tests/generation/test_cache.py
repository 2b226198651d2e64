"""Test 1: with and without the KV cache, every step's logits equal a plain full forward (1e-5)."""

from __future__ import annotations

import pytest
import torch

from tests.generation.conftest import (
    POSITIONALS,
    POSITIONED,
    reference_next_logits,
    tiny_decoder,
    tiny_seq2seq,
)
from zoo.generation import pad_prompts


def _check_steps_against_reference(model, out, mask0):
    seqs = out.sequences
    prompt_len = mask0.shape[1]
    assert len(out.logits) == seqs.shape[1] - prompt_len
    for step, logits in enumerate(out.logits):
        cur = seqs[:, : prompt_len + step]
        mask = torch.cat([mask0, torch.ones(len(cur), step, dtype=torch.long)], dim=1)
        torch.testing.assert_close(logits, reference_next_logits(model, cur, mask), atol=1e-5, rtol=0)


@pytest.mark.parametrize("positional", POSITIONALS)
@pytest.mark.parametrize("kv_heads", [4, 1], ids=["mha", "gqa"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_step_logits_match_full_forward(positional, kv_heads, use_cache):
    model = tiny_decoder(positional, n_kv_heads=kv_heads)
    # mixed lengths (left padding), one prompt longer than max_seq_len=12, 10 new tokens passes it
    ids, mask = pad_prompts([list(range(3, 17)), [5, 6, 7], [9, 8, 7, 6, 5, 4, 3]], pad_id=0)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=10, eos_token_id=[], use_cache=use_cache,
                         return_dict=True)
    assert out.sequences.shape == (3, 14 + 10)
    _check_steps_against_reference(model, out, mask)


@pytest.mark.parametrize("positional", POSITIONED)
@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
def test_encoder_decoder_cache_matches_full_forward(positional, kv_heads):
    model = tiny_seq2seq(positional, n_kv_heads=kv_heads)
    src, src_mask = pad_prompts([[4, 5, 6, 7, 8], [9, 10]], pad_id=0, side="right")
    outs = {
        c: model.generate(src, attention_mask=src_mask, max_new_tokens=8, eos_token_id=[], use_cache=c,
                          return_dict=True)
        for c in (True, False)
    }
    assert torch.equal(outs[True].sequences, outs[False].sequences)
    tgt = outs[True].sequences
    assert (tgt[:, 0] == model.config.start_id).all()
    with torch.no_grad():  # reference: one teacher-forced forward over the final target
        ref = model(src, decoder_input_ids=tgt, attention_mask=src_mask).logits.float()
    for c in (True, False):
        for step, logits in enumerate(outs[c].logits):
            torch.testing.assert_close(logits, ref[:, step], atol=1e-5, rtol=0)


def test_cross_attention_kv_computed_once():
    model = tiny_seq2seq()
    calls = []
    for layer in model.decoder_stack.layers:
        layer.cross_attn.kv.register_forward_hook(lambda *a: calls.append(1))
    model.generate(torch.tensor([[4, 5, 6]]), max_new_tokens=5, eos_token_id=[], num_beams=2)
    assert len(calls) == len(model.decoder_stack.layers)  # once per layer, not once per step


def test_beam_reorder_keeps_cross_attention_kv_and_matches_no_cache():
    """Beams of one source share its cross K/V: a beam step reorders the self-attention cache only, and
    the result equals beam search without any cache."""
    from zoo.generation.stepper import EncoderDecoderStepper

    model = tiny_seq2seq("rope", n_kv_heads=2)
    src, src_mask = pad_prompts([[4, 5, 6, 7, 8], [9, 10]], pad_id=0, side="right")
    with torch.no_grad():
        stepper = EncoderDecoderStepper(model, src, src_mask, use_cache=True)
        stepper.next_logits()
        stepper.expand(3)
        layer = stepper.cache.layers[0]
        cross_k, self_k = layer.cross_k, layer.k
        stepper.reorder(torch.tensor([2, 2, 0, 4, 3, 3]))  # within each source's 3 rows
    assert layer.cross_k is cross_k  # not copied
    assert layer.k is not self_k
    kw = dict(max_new_tokens=7, eos_token_id=[3], num_beams=3, num_return_sequences=2, return_dict=True)
    cached = model.generate(src, attention_mask=src_mask, use_cache=True, **kw)
    plain = model.generate(src, attention_mask=src_mask, use_cache=False, **kw)
    assert torch.equal(cached.sequences, plain.sequences)
    torch.testing.assert_close(cached.scores, plain.scores, atol=1e-5, rtol=0)
