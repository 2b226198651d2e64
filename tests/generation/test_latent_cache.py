"""`model.mixer.cache=latent` (zoo.modules.mla): decoding that keeps only the latent and the shared rope key
per token and layer, attending with kv_b folded into query and output, gives the materialised cache's tokens
and logits (within 1e-5) for greedy, seeded sampling, beam search, speculative decoding, the static cache
(eager, and compiled in the e2e run) and the server's continuous batching."""

import pytest
import torch

import zoo

MLA = {"name": "mla", "kv_lora_rank": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6}
TINY = {"vocab_size": 40, "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 48, "max_seq_len": 48,
        "n_kv_heads": None, "positional": {"name": "rope", "layout": "interleaved"}}
IDS = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
MASK = (IDS != 0).long()  # the first prompt left-padded
WINDOWED = {"mixer": {"q_lora_rank": 10, "sliding_window": 3}, "layer_pattern": ["local", "global"]}


def pair(preset: str = "llama_small", **overrides) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same weights twice: cache=latent, cache=materialised."""
    mixer = {**MLA, **overrides.pop("mixer", {})}
    torch.manual_seed(0)
    latent = zoo.build(preset, **{**TINY, **overrides, "mixer": {**mixer, "cache": "latent"}}).eval()
    materialised = zoo.build(preset, **{**TINY, **overrides, "mixer": {**mixer, "cache": "materialised"}})
    materialised.load_state_dict(latent.state_dict())
    return latent, materialised.eval()


def assert_same_run(a, b) -> None:
    assert torch.equal(a.sequences, b.sequences)
    assert len(a.logits) == len(b.logits)
    for x, y in zip(a.logits, b.logits, strict=True):
        assert (x - y).abs().max() < 1e-5


def test_the_cache_holds_the_latent_and_rope_key_only():
    latent, materialised = pair()
    for model, heads, width in ((latent, 1, 12 + 4), (materialised, 4, 8 + 4)):
        cache = model.new_cache()
        model(IDS, attention_mask=MASK, cache=cache)
        layer = cache.layers[0]
        assert layer.k[:, :, : layer.length].shape == (2, heads, 6, width)
        assert layer.v.shape[-1] == (0 if heads == 1 else 6)


@pytest.mark.parametrize("options", [
    {},
    {"do_sample": True, "temperature": 0.9, "top_k": 20, "seed": 3, "num_return_sequences": 2},
    {"cache_implementation": "static"},
    {"cache_implementation": "static", "do_sample": True, "seed": 5},
], ids=["greedy", "sample", "static_greedy", "static_sample"])
@pytest.mark.parametrize("overrides", [{}, WINDOWED], ids=["plain", "q_lora_window"])
def test_decoding_equals_the_materialised_cache(options, overrides):
    latent, materialised = pair(**overrides)
    kw = dict(attention_mask=MASK, max_new_tokens=10, eos_token_id=[], return_dict=True, **options)
    assert_same_run(latent.generate(IDS, **kw), materialised.generate(IDS, **kw))


def test_a_long_prompt_is_decompressed_and_the_decoding_folded():
    """Past L (N + V) / (2L - N - V) = 12 x 14 / 10 queries the prompt attends with the latent decompressed
    (fewer multiply-adds), one token at a time folded; both give the materialised cache's run."""
    latent, materialised = pair()
    attention = latent.decoder_stack.layers[0].self_attn
    assert attention._absorbs(16) and not attention._absorbs(17)
    prompt = torch.randint(3, 40, (2, 24), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=10, eos_token_id=[], return_dict=True)
    assert_same_run(latent.generate(prompt, **kw), materialised.generate(prompt, **kw))


def test_beam_search_equals_the_materialised_cache():
    latent, materialised = pair()
    kw = dict(attention_mask=MASK, max_new_tokens=8, num_beams=3, num_return_sequences=2, eos_token_id=[3],
              return_dict=True)
    a, b = latent.generate(IDS, **kw), materialised.generate(IDS, **kw)
    assert torch.equal(a.sequences, b.sequences)
    assert (a.scores - b.scores).abs().max() < 1e-5


def test_speculative_decoding_equals_the_materialised_cache():
    latent, materialised = pair()
    torch.manual_seed(1)
    draft = zoo.build("llama_small", **{**TINY, "n_layers": 1, "mixer": MLA}).eval()
    for options in ({}, {"do_sample": True, "seed": 2}):
        kw = dict(max_new_tokens=10, eos_token_id=[], return_dict=True, assistant_model=draft,
                  num_assistant_tokens=3, **options)
        assert_same_run(latent.generate(IDS[1:], **kw), materialised.generate(IDS[1:], **kw))


def test_encoder_decoder_decoding_equals_the_materialised_cache():
    latent, materialised = pair("transformer_tiny", norm="rmsnorm")
    kw = dict(attention_mask=MASK, max_new_tokens=8, eos_token_id=[], return_dict=True)
    assert_same_run(latent.generate(IDS, **kw), materialised.generate(IDS, **kw))


def test_lora_on_kv_b_is_folded_into_the_latent_attention():
    from zoo.finetune.lora import add_lora

    latent, materialised = pair()
    for model in (latent, materialised):
        add_lora(model, rank=2, alpha=4, dropout=0.0, targets=["self_attn.kv_b"])
    with torch.no_grad():
        for name, p in latent.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # an adapter that changes the output
    materialised.load_state_dict(latent.state_dict())
    kw = dict(attention_mask=MASK, max_new_tokens=8, eos_token_id=[], return_dict=True)
    assert_same_run(latent.generate(IDS, **kw), materialised.generate(IDS, **kw))


def test_continuous_batching_gives_the_materialised_tokens():
    from tests.serving.test_engine import run_engine

    latent, materialised = pair()
    got = run_engine(latent)
    assert got == run_engine(materialised)
    assert all(got)


@pytest.mark.e2e  # one compile of the decode step: seconds on 2 cores
def test_the_compiled_step_equals_the_materialised_cache():
    latent, materialised = pair()
    kw = dict(attention_mask=MASK, max_new_tokens=8, eos_token_id=[], return_dict=True, compile=True)
    assert_same_run(latent.generate(IDS, **kw), materialised.generate(IDS, **kw))
