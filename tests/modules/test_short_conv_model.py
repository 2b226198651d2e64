"""Decoding an LFM2-shaped hybrid (model.linear_mixer=short_conv beside attention layers) with each conv
layer's window in the cache (zoo.modules.cache.LayerCache.state): greedy, seeded sampling and beam search
(windows reordered with the beams) give the tokens and logits of decoding without a cache; a left-padded
batch gives each row's tokens alone; continuous batching gives each prompt's tokens alone; the window's size
does not grow (speculative decoding and the static cache: tests/generation/test_recurrent_modes.py); packed
documents are refused naming the key."""

import re

import pytest
import torch

import zoo

HYBRID = dict(arch="decoder", vocab_size=40, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=48,
              max_seq_len=48, norm="rmsnorm", positional="rope", activation="swiglu", bias=False,
              mixer={"name": "attention", "qk_norm": True},
              linear_mixer={"name": "short_conv", "conv_bias": True},
              layer_pattern=["linear", "full", "linear"], init_std=0.2, tie_embeddings=False)
IDS = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
MASK = (IDS != 0).long()  # the first prompt left-padded


def model(**keys) -> torch.nn.Module:
    """Weights drawn wide (and conv biases on, so a pad would move the window) so that greedy tokens depend on
    the whole history."""
    torch.manual_seed(0)
    return zoo.build({**HYBRID, **keys}).eval()


@pytest.mark.parametrize("options", [
    {},
    {"do_sample": True, "temperature": 0.9, "top_k": 20, "seed": 3, "num_return_sequences": 2},
    {"num_beams": 3, "num_return_sequences": 2},
], ids=["greedy", "sample", "beam"])
def test_cached_decoding_equals_decoding_without_a_cache(options):
    m = model()
    kw = dict(attention_mask=MASK, max_new_tokens=10, eos_token_id=[], **options)
    if "num_beams" in options:  # beam search's result holds no per-step logits: compare the sequences
        assert torch.equal(m.generate(IDS, **kw), m.generate(IDS, use_cache=False, **kw))
        return
    a, b = m.generate(IDS, return_dict=True, **kw), m.generate(IDS, use_cache=False, return_dict=True, **kw)
    assert torch.equal(a.sequences, b.sequences)
    for x, y in zip(a.logits, b.logits, strict=True):
        assert (x - y).abs().max() < 1e-5


def test_a_left_padded_batch_decodes_each_row_as_alone():
    """Tokens and every step's logits (a pad in the window moves logits before it flips a token)."""
    m = model()
    batch = m.generate(IDS, attention_mask=MASK, max_new_tokens=8, eos_token_id=[], return_dict=True)
    for row in range(2):
        pads = int((MASK[row] == 0).sum())
        alone = m.generate(IDS[row : row + 1, pads:], max_new_tokens=8, eos_token_id=[], return_dict=True)
        assert torch.equal(batch.sequences[row, 6:], alone.sequences[0, -8:])
        for x, y in zip(batch.logits, alone.logits, strict=True):
            assert (x[row] - y[0]).abs().max() < 1e-4


def test_the_conv_layers_hold_a_fixed_size_window():
    m = model()
    sizes = []
    for length in (4, 20):
        cache = m.new_cache()
        m(torch.randint(3, 40, (2, length)), cache=cache)
        conv, attention = cache.layers[0], cache.layers[1]
        assert conv.k is None and conv.state["conv"].shape == (2, 2, 32)  # L - 1 = 2 inputs of d_model
        assert attention.k is not None and not attention.state
        sizes.append(conv.state["conv"].numel())
    assert sizes[0] == sizes[1]


def test_continuous_batching_gives_each_prompt_its_tokens_alone():
    from tests.serving.test_engine import LENGTHS, PROMPTS, options, run_engine

    m = model(vocab_size=96)
    alone = [m.generate([p], max_new_tokens=n, eos_token_id=[], use_cache=False, **options(i))[0, len(p):]
             .tolist() for i, (p, n) in enumerate(zip(PROMPTS, LENGTHS, strict=True))]
    assert run_engine(m) == alone


def test_packed_documents_are_refused_naming_the_mixer():
    m = model()
    ids = torch.randint(3, 40, (1, 8))
    documents = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]])
    message = "model.linear_mixer=short_conv carries one state along each row"
    with pytest.raises(ValueError, match=re.escape(message)):
        m(ids, document_ids=documents)
