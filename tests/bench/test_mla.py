"""bench/bench_mla.py: the cache bytes per token it reports, counted by hand from the shapes, and its decode
loop giving the same greedy tokens through either cache (and leaving the prompt's cache as it found it)."""

from __future__ import annotations

import torch

from bench.bench_mla import QUICK_KEYS, cache_bytes_per_token, decode, pair, prefill


def test_cache_bytes_per_token_by_hand():
    latent, materialised = pair("mla_small", QUICK_KEYS, 64)
    prompt = torch.randint(3, 64, (1, 10))
    (cache_l, first), (cache_m, _) = prefill(latent, prompt), prefill(materialised, prompt)
    layers, heads, m = 2, 4, QUICK_KEYS["mixer"]
    assert cache_bytes_per_token(cache_l) == layers * (m["kv_lora_rank"] + m["qk_rope_head_dim"]) * 4
    assert cache_bytes_per_token(cache_m) == layers * heads * (m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
                                                               + m["v_head_dim"]) * 4
    token = first.argmax(-1, keepdim=True)
    tokens, _ = decode(latent, cache_l, token, 5)
    assert cache_l.length == 10  # cropped back to the prompt
    assert decode(latent, cache_l, token, 5)[0] == tokens == decode(materialised, cache_m, token, 5)[0]
