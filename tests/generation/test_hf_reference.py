"""Greedy and beam search against Hugging Face `generate` on the same weights (tiny random GPT-2 and
Llama imported with zoo.from_pretrained): same tokens and same n-best scores. HF pads finished beam
hypotheses with EOS where zoo uses pad_id, so tokens after a row's first EOS are compared as pads."""

from __future__ import annotations

import pytest
import torch

import zoo

transformers = pytest.importorskip("transformers")

PROMPTS = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])


def _hf_and_zoo(kind: str, tmp_path):
    torch.manual_seed(0)
    common = dict(vocab_size=40, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_positions=32, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0, **common)
        hf = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2,
                                       max_position_embeddings=64, **common)
        hf = transformers.LlamaForCausalLM(cfg)
    hf.eval().save_pretrained(tmp_path)
    return hf, zoo.from_pretrained(tmp_path)


def _pad_after_eos(seqs: torch.Tensor, prompt_len: int, eos: int) -> torch.Tensor:
    new = seqs[:, prompt_len:]
    after = (new == eos).long().cumsum(-1) - (new == eos).long() > 0  # strictly after the first EOS
    return torch.cat([seqs[:, :prompt_len], new.masked_fill(after, 0)], dim=1)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_greedy_and_beam_search_match_hugging_face(kind, tmp_path):
    hf, ours = _hf_and_zoo(kind, tmp_path)
    free = ours.generate(PROMPTS, max_new_tokens=10, eos_token_id=[])
    eos = int(free[1, 4 + 1])  # a token the model likes: hypotheses end at different steps
    common = dict(max_new_tokens=10, eos_token_id=eos)
    with torch.no_grad():
        hf_greedy = hf.generate(PROMPTS, attention_mask=torch.ones_like(PROMPTS), do_sample=False,
                                pad_token_id=0, **common)
    assert torch.equal(ours.generate(PROMPTS, **common), _pad_after_eos(hf_greedy, 4, eos))
    for early_stopping in (True, False):
        for length_penalty in (1.0, 0.5, 2.0):
            beam = dict(num_beams=3, num_return_sequences=3, length_penalty=length_penalty,
                        early_stopping=early_stopping, **common)
            with torch.no_grad():
                ref = hf.generate(PROMPTS, attention_mask=torch.ones_like(PROMPTS), do_sample=False,
                                  pad_token_id=0, output_scores=True, return_dict_in_generate=True, **beam)
            got = ours.generate(PROMPTS, return_dict=True, **beam)
            expected = _pad_after_eos(ref.sequences, 4, eos)
            assert torch.equal(got.sequences, expected[:, : got.sequences.shape[1]])
            assert (expected[:, got.sequences.shape[1] :] == 0).all()
            torch.testing.assert_close(got.scores, ref.sequences_scores, atol=1e-5, rtol=1e-5)


def _eos_ending_apart(free: torch.Tensor, prompt_len: int, every: int) -> tuple[int, int]:
    """(a token both rows emit, first at different steps, the later one not at a multiple of `every`; the
    number of new tokens greedy makes when it is the EOS)."""
    new = free[:, prompt_len:]
    for token in new.unique().tolist():
        hits = new == token
        if not bool(hits.any(1).all()):
            continue
        first = hits.int().argmax(1)  # each row's first step emitting it
        end = int(first.max()) + 1
        if int(first[0]) != int(first[1]) and end % every:
            return token, end
    raise AssertionError("no such token: pick another seed")


def _rows_ending_apart(tmp_path):
    """A tiny Llama both ways, an EOS its rows emit at different steps (not on a multiple of 8), and
    transformers' greedy output with it: (zoo model, zoo's output without EOS, generate kwargs, the step the
    last row ends at, transformers' sequences)."""
    hf, ours = _hf_and_zoo("llama", tmp_path)
    free = ours.generate(PROMPTS, max_new_tokens=24, eos_token_id=[])
    eos, end = _eos_ending_apart(free, 4, every=8)
    common = dict(max_new_tokens=24, eos_token_id=eos)
    with torch.no_grad():
        expected = hf.generate(PROMPTS, attention_mask=torch.ones_like(PROMPTS), do_sample=False,
                               pad_token_id=0, **common)
    return ours, free, common, end, expected


def test_static_cache_greedy_stops_where_hugging_face_does(tmp_path):
    """The static-cache loop asks "every row finished?" only every 8 tokens; its output still ends at the step
    where the last row emitted EOS (rows ending at different steps, not on a multiple of 8), with pads after
    each row's EOS and one logits tensor per step, as transformers' greedy and zoo's dynamic cache. (Llama:
    the tiny random GPT-2 repeats one token per row from the first step, so its rows cannot end apart.)"""
    ours, free, common, end, expected = _rows_ending_apart(tmp_path)
    got = ours.generate(PROMPTS, cache_implementation="static", return_dict=True, **common)
    assert expected.shape[1] == 4 + end
    assert torch.equal(got.sequences, expected)
    assert len(got.logits) == end
    assert torch.equal(ours.generate(PROMPTS, **common), expected)


@pytest.mark.e2e
def test_compiled_greedy_stops_where_hugging_face_does(tmp_path):
    """The compiled step (greedy token picked inside the graph, EOS checked every 8 tokens) against
    transformers, with rows ending at different steps; e2e: compiling takes seconds."""
    ours, free, common, end, expected = _rows_ending_apart(tmp_path)
    assert torch.equal(ours.generate(PROMPTS, compile=True, **common), expected)
    assert torch.equal(ours.generate(PROMPTS, compile=True, max_new_tokens=24, eos_token_id=[]), free)
