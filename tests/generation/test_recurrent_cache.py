"""Decoding `model.mixer=gated_deltanet` with its recurrent state in the cache (zoo.modules.cache.LayerCache.
state): greedy, seeded sampling and beam search give the tokens and logits (within 1e-5) of decoding without a
cache (the whole sequence re-read each step); a left-padded batch gives each row's tokens alone; continuous
batching (rows joining and leaving) gives each prompt's tokens alone; the cache's size does not grow with
the length; a cache not told to keep its states cannot be rolled back (speculative decoding and the static
cache: tests/generation/test_recurrent_modes.py)."""

import pytest
import torch

import zoo

GDN = {"name": "gated_deltanet", "linear_num_key_heads": 2, "linear_num_value_heads": 4,
       "linear_key_head_dim": 8, "linear_value_head_dim": 6, "chunk_size": 4}
TINY = {"vocab_size": 40, "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 48, "max_seq_len": 48,
        "positional": "none", "norm": "rmsnorm", "mixer": GDN}
IDS = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
MASK = (IDS != 0).long()  # the first prompt left-padded


def model() -> torch.nn.Module:
    """Weights drawn wide and the head untied, so that greedy tokens depend on the whole history (at the
    default init a tiny model repeats its last token, which a lost state would not change)."""
    torch.manual_seed(0)
    return zoo.build("gpt_nano", **TINY, init_std=0.2, tie_embeddings=False).eval()


def assert_same_run(a, b) -> None:
    assert torch.equal(a.sequences, b.sequences)
    assert len(a.logits) == len(b.logits)
    for x, y in zip(a.logits, b.logits, strict=True):
        assert (x - y).abs().max() < 1e-5


@pytest.mark.parametrize("options", [
    {},
    {"do_sample": True, "temperature": 0.9, "top_k": 20, "seed": 3, "num_return_sequences": 2},
    {"num_beams": 3, "num_return_sequences": 2},
], ids=["greedy", "sample", "beam"])
def test_cached_decoding_equals_decoding_without_a_cache(options):
    m = model()
    kw = dict(attention_mask=MASK, max_new_tokens=10, eos_token_id=[], return_dict=True, **options)
    if "num_beams" in options:  # beam search's result holds no per-step logits: compare the sequences
        kw.pop("return_dict")
        assert torch.equal(m.generate(IDS, **kw), m.generate(IDS, use_cache=False, **kw))
    else:
        assert_same_run(m.generate(IDS, **kw), m.generate(IDS, use_cache=False, **kw))


def test_a_left_padded_batch_decodes_each_row_as_alone():
    m = model()
    batch = m.generate(IDS, attention_mask=MASK, max_new_tokens=8, eos_token_id=[])
    for row in range(2):
        pads = int((MASK[row] == 0).sum())
        alone = m.generate(IDS[row : row + 1, pads:], max_new_tokens=8, eos_token_id=[])
        assert torch.equal(batch[row, 6:], alone[0, -8:])


def test_the_cache_holds_a_fixed_size_state_per_layer():
    m = model()
    sizes = []
    for length in (4, 20):
        cache = m.new_cache()
        m(torch.randint(3, 40, (2, length)), cache=cache)
        layer = cache.layers[0]
        assert layer.k is None and set(layer.state) == {"conv", "recurrent"}
        assert layer.state["conv"].shape == (2, 3, 2 * 2 * 8 + 4 * 6)  # K - 1 inputs of [q | k | v]
        assert layer.state["recurrent"].shape == (2, 4, 8, 6)  # (B, Hv, Dk, Dv)
        sizes.append(sum(t.numel() for t in layer.state.values()))
    assert sizes[0] == sizes[1]


def test_continuous_batching_gives_each_prompt_its_tokens_alone():
    from tests.serving.test_engine import LENGTHS, PROMPTS, options, run_engine

    m = model()
    alone = [m.generate([p], max_new_tokens=n, eos_token_id=[], use_cache=False, **options(i))[0, len(p):]
             .tolist() for i, (p, n) in enumerate(zip(PROMPTS, LENGTHS, strict=True))]
    assert run_engine(m) == alone


def test_a_recurrent_cache_without_kept_states_cannot_be_rolled_back():
    m = model()
    cache = m.new_cache()
    m(IDS[1:], cache=cache)
    with pytest.raises(ValueError, match="this cache holds a recurrent state"):
        cache.crop(3)
