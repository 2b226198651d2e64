"""Hybrid stacks: `model.layer_pattern` tags each layer `full` (model.mixer) or `linear` (model.linear_mixer),
as Qwen3-Next / Qwen3.5 put three Gated DeltaNet layers before each attention layer. The layers get their own
mixer with their own keys; decoding carries K/V for the attention layers and a recurrent state for the others
and gives what full forwards give (speculative decoding and the static cache on hybrids:
tests/generation/test_recurrent_modes.py); what one of the mixers cannot do (a bidirectional stack) is
refused naming that mixer's key."""

from __future__ import annotations

import re

import pytest
import torch

import zoo
from zoo.config import ModelConfig
from zoo.hydra_schema import part_overrides
from zoo.modules.attention import Attention
from zoo.modules.gated_deltanet import GatedDeltaNet
from zoo.modules.mask import build_mask

GDN = {"name": "gated_deltanet", "linear_num_key_heads": 2, "linear_num_value_heads": 4,
       "linear_key_head_dim": 8, "linear_value_head_dim": 6, "chunk_size": 4}
HYBRID = dict(arch="decoder", vocab_size=64, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=48,
              max_seq_len=64, norm="rmsnorm", positional="rope", activation="swiglu", init_std=0.2,
              tie_embeddings=False, linear_mixer=GDN, layer_pattern=["linear", "linear", "linear", "full"])


def _model(**keys) -> torch.nn.Module:
    torch.manual_seed(0)
    return zoo.build({**HYBRID, **keys}).eval()


def test_each_layer_runs_its_own_mixer_with_its_own_keys():
    model = _model(layer_pattern=["linear", "linear", "linear", "full"], n_layers=8)
    kinds = [type(layer.self_attn) for layer in model.decoder_stack.layers]
    assert kinds == [GatedDeltaNet, GatedDeltaNet, GatedDeltaNet, Attention] * 2
    attention = model.decoder_stack.layers[3].self_attn
    assert (attention.n_heads, attention.n_kv_heads) == (4, 2)  # the spine's heads are the full layers'
    assert model.decoder_stack.layers[0].self_attn.value_heads == 4  # the linear mixer's own keys
    assert [model.config.layer_is_linear(i) for i in range(4)] == [True, True, True, False]


def test_the_linear_layers_may_have_their_own_residual_wiring():
    """OLMo-hybrid: attention layers post_sublayer (x + norm(f(x))), linear layers pre-norm (x + f(norm(x)))
    through model.linear_mixer.norm_placement; each layer has the norms of its own wiring and computes it."""
    model = _model(norm_placement="post_sublayer", linear_mixer={**GDN, "norm_placement": "pre"})
    layers = model.decoder_stack.layers
    assert [model.config.layer_norm_placement(i) for i in range(4)] == ["pre"] * 3 + ["post_sublayer"]
    assert [hasattr(layer, "norm_self") for layer in layers] == [True, True, True, False]
    assert [hasattr(layer, "post_norm_self") for layer in layers] == [False, False, False, True]
    x, mask = torch.randn(2, 5, 32), build_mask(None, causal=True, q_len=5, k_len=5)
    linear, full = layers[0], layers[3]
    with torch.no_grad():
        h = x + linear.self_attn(linear.norm_self(x), mask)[0]
        assert torch.allclose(linear(x, mask)[0], h + linear.ffn(linear.norm_ffn(h)), atol=1e-6)
        h = x + full.post_norm_self(full.self_attn(x, mask)[0])
        assert torch.allclose(full(x, mask)[0], h + full.post_norm_ffn(full.ffn(h)), atol=1e-6)


def test_it_trains():
    model = _model().train()
    ids = torch.randint(3, 64, (4, 12))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(6):
        optimizer.zero_grad()
        loss = model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.3


def test_cached_decoding_equals_full_forwards_and_a_padded_row_equals_it_alone():
    """Greedy with the cache (K/V on the attention layer, the state on the linear ones) equals greedy that
    runs the whole sequence again each step; a left-padded row decodes as it does alone."""
    model = _model()
    prompt = torch.tensor([[5, 9, 11, 3, 7, 21, 8]])
    cached = model.generate(prompt, max_new_tokens=8, use_cache=True)
    again = model.generate(prompt, max_new_tokens=8, use_cache=False)
    assert torch.equal(cached, again)
    short = torch.tensor([[12, 30, 4]])
    pad = model.config.pad_id
    batch = torch.tensor([[5, 9, 11, 3, 7, 21, 8], [pad, pad, pad, pad, 12, 30, 4]])
    mask = (batch != pad).long()
    both = model.generate(batch, attention_mask=mask, max_new_tokens=6)
    alone = model.generate(short, max_new_tokens=6)
    assert torch.equal(both[1, -6:], alone[0, -6:])
    assert torch.equal(both[0, -6:], cached[0, 7:13])


def test_beam_search_runs_with_mixed_caches():
    model = _model()
    out = model.generate(torch.tensor([[5, 9, 11, 3]]), max_new_tokens=5, num_beams=3)
    assert out.shape == (1, 9)


@pytest.mark.parametrize("keys, message", [
    ({"linear_mixer": None}, "model.layer_pattern=['linear', 'linear', 'linear', 'full'] tags layers 'full', "
                             "which needs model.linear_mixer"),
    ({"layer_pattern": []}, "model.linear_mixer=gated_deltanet is set but model.layer_pattern=[] tags none "
                            "of the 4 layers linear"),
    ({"linear_mixer": {**GDN, "linear_num_value_heads": 3}},
     "model.mixer.linear_num_value_heads=3 is not divisible by model.mixer.linear_num_key_heads=2"),
    ({"linear_mixer": {"name": "gated_deltanet", "sliding_window": 4}},
     "model.linear_mixer=gated_deltanet has no key 'sliding_window'"),
    ({"arch": "encoder"}, "model.linear_mixer=gated_deltanet reads the tokens left to right only"),
    ({"layer_pattern": ["linear+full"]}, "gives two tags of one dimension; at most one of full|linear"),
    ({"linear_mixer": {**GDN, "norm_placement": "inside"}},
     "model.linear_mixer.norm_placement='inside' is not a residual wiring; choose one of"),
    ({"linear_mixer": {**GDN, "norm_placement": "post_sublayer"}, "first_attn_norm": False},
     "model.first_attn_norm=false drops layer 0's attention input norm, but "
     "model.linear_mixer.norm_placement='post_sublayer' has no input norm"),
])
def test_bad_hybrids_are_one_error_naming_the_key(keys, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        zoo.build({**HYBRID, **keys})


def test_the_config_round_trips_and_composes_from_the_command_line():
    cfg = ModelConfig(**HYBRID)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from zoo.presets import config_root
    from zoo.training.hydra_configs import register_train_configs

    register_train_configs()
    given = ["model=llama_small", "model.linear_mixer=gated_deltanet", "model.linear_mixer.chunk_size=8",
             "model.layer_pattern=[linear,linear,linear,full]", "model.n_layers=4"]
    with initialize_config_dir(config_dir=str(config_root()), version_base="1.3"):
        composed = compose("config", overrides=part_overrides(given)).model
    read = ModelConfig.from_dict(OmegaConf.to_container(composed, resolve=True))
    assert (read.linear_mixer.name, read.linear_mixer.chunk_size, read.mixer.name) == (
        "gated_deltanet", 8, "attention")
    assert [read.layer_is_linear(i) for i in range(4)] == [True, True, True, False]


def test_continuous_batching_gives_each_prompt_its_tokens_alone():
    """The server's engine: rows join and leave a batch whose layers hold K/V (full) and states (linear)."""
    from tests.serving.test_engine import LENGTHS, PROMPTS, options, run_engine

    model = _model(vocab_size=96)
    alone = [model.generate([p], max_new_tokens=n, eos_token_id=[], use_cache=False, **options(i))[0, len(p):]
             .tolist() for i, (p, n) in enumerate(zip(PROMPTS, LENGTHS, strict=True))]
    assert run_engine(model) == alone


def test_a_padded_batch_under_a_per_head_score_bias_equals_each_row_alone():
    """alibi biases each head's scores: the linear layers read which tokens are pads off that (B, H, T, T)
    mask too (it failed to expand before), and a left-padded row gives the logits of the row alone."""
    model = _model(positional="alibi", n_kv_heads=None)
    row = torch.tensor([[5, 9, 11, 3, 7]])
    padded = torch.tensor([[0, 0, 5, 9, 11, 3, 7], [4, 6, 8, 10, 12, 14, 16]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1] * 7])
    with torch.no_grad():
        alone = model(row).logits[0]
        batched = model(padded, attention_mask=mask).logits[0, 2:]
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-5)
