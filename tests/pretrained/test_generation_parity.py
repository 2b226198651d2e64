"""Greedy decoding of imported checkpoints: zoo's `generate` and a plain argmax loop over zoo's forward
must produce exactly the tokens of transformers' `generate(do_sample=False, num_beams=1)`."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MarianConfig,
    MarianMTModel,
)

import zoo
from tests.pretrained.decoder_checks import GREEDY, NEW, greedy_matches, same_tokens
from tests.pretrained.helpers import perturbed, saved
from zoo.generation import generate

SEQ2SEQ = dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, vocab_size=99,
               max_position_embeddings=40)


def decoders():
    yield "gpt2", GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=64,
                                             bos_token_id=1, eos_token_id=2, pad_token_id=0))
    yield "llama", LlamaForCausalLM(LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                num_key_value_heads=1, intermediate_size=40, vocab_size=99,
                                                pad_token_id=0, bos_token_id=1, eos_token_id=2))


def seq2seqs():
    yield "bart", BartForConditionalGeneration(BartConfig(**SEQ2SEQ))
    yield "marian", MarianMTModel(MarianConfig(**SEQ2SEQ, pad_token_id=98, eos_token_id=0,
                                               decoder_start_token_id=98,
                                               bos_token_id=None, activation_function="swish",
                                               scale_embedding=True))


@pytest.mark.parametrize("name,hf", list(decoders()), ids=[n for n, _ in decoders()])
def test_decoder_greedy_matches_transformers(tmp_path, name, hf):
    hf = perturbed(hf, scale=0.3)  # larger noise: sharper, less tie-prone next-token distributions
    greedy_matches(hf, zoo.from_pretrained(saved(hf, tmp_path)))


@pytest.mark.parametrize("name,hf", list(seq2seqs()), ids=[n for n, _ in seq2seqs()])
def test_seq2seq_greedy_matches_transformers(tmp_path, name, hf):
    hf = perturbed(hf, scale=0.3)
    model = zoo.from_pretrained(saved(hf, tmp_path))
    src = torch.randint(3, 90, (3, 7), generator=torch.Generator().manual_seed(6))
    mask = torch.ones_like(src)
    mask[1, 5:] = 0
    mask[2, 3:] = 0
    pad = model.config.pad_id
    src = src.masked_fill(mask == 0, pad)
    no_forcing = dict(forced_eos_token_id=None, forced_bos_token_id=None, min_length=0,
                      no_repeat_ngram_size=0)
    with torch.no_grad():  # 1) explicit argmax loop over zoo's forward, no EOS stop
        ref = hf.generate(input_ids=src, attention_mask=mask, eos_token_id=None, pad_token_id=pad,
                          **no_forcing, **GREEDY)
        tgt = torch.full((3, 1), model.config.start_id)
        for _ in range(NEW):
            nxt = model(src, tgt, mask).logits[:, -1].argmax(-1, keepdim=True)
            tgt = torch.cat([tgt, nxt], 1)
    assert torch.equal(tgt, ref)

    eos = int(tgt[0, 3])  # 2) zoo.generation.generate with an EOS row 0 emits at its third token
    with torch.no_grad():
        ref = hf.generate(input_ids=src, attention_mask=mask, eos_token_id=eos, pad_token_id=pad,
                          **no_forcing, **GREEDY)
    assert bool((ref[0, 4:] == pad).all())
    same_tokens(generate(model, src, attention_mask=mask, eos_token_id=eos, pad_token_id=pad, **GREEDY), ref,
                pad=pad)
