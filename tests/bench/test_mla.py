"""bench/bench_mla.py: the cache bytes per token it reports, counted by hand from the shapes, and its decode
loop giving the same greedy tokens through either cache (and leaving the prompt's cache as it found it); the
MLA model's width matching GQA's parameter count; the val-loss sentence from hand-made numbers; the --quick
section's two tables."""

from __future__ import annotations

import statistics

import torch

from bench.bench_mla import (
    MODELS,
    QUICK_KEYS,
    TRAIN,
    build_trained,
    cache_bytes_per_token,
    decode,
    matched_widths,
    pair,
    prefill,
    verdict,
)
from bench.run import main
from zoo.modules.mla import LatentAttention


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


def test_mla_width_matches_the_gqa_parameter_count():
    """MLA's attention holds more than GQA's at the quick size, so its SwiGLU width gives way until the totals
    are within half a width step (3 x d_model x layers parameters)."""
    t = TRAIN[True]
    widths = matched_widths(t, 300)
    assert widths["GQA"] == t.d_ff and widths["MLA"] < t.d_ff
    models = {name: build_trained(t, name, widths[name], 300) for name in MODELS}
    assert isinstance(models["MLA"].decoder_stack.layers[0].self_attn, LatentAttention)
    assert models["GQA"].config.kv_heads == t.kv_heads
    counts = {name: m.num_parameters() for name, m in models.items()}
    assert abs(counts["MLA"] - counts["GQA"]) <= 3 * t.d_model * t.n_layers / 2, counts


def test_verdict_reads_the_numbers():
    inside = {"MLA": [{"val": 3.00}, {"val": 3.04}, {"val": 2.99}],
              "GQA": [{"val": 3.02}, {"val": 3.03}, {"val": 3.01}]}
    sd = statistics.stdev([3.00, 3.04, 2.99])  # 0.026, MLA's: the larger
    assert verdict(inside) == (
        f"**MLA** has the lower val loss: MLA 3.010, GQA 3.020, a gap of 0.010 in MLA's favour over GQA; the "
        f"larger seed standard deviation is {sd:.3f}, so the gap does not exceed seed noise. Per seed (MLA - "
        "GQA, same batches and seed): -0.020, +0.010, -0.020.")
    apart = {"MLA": [{"val": 3.30}, {"val": 3.32}], "GQA": [{"val": 3.00}, {"val": 3.01}]}
    assert verdict(apart).startswith("**GQA** has the lower val loss: MLA 3.310, GQA 3.005, a gap of 0.305")
    assert "so the gap exceeds seed noise" in verdict(apart)
    assert verdict(apart).endswith("+0.300, +0.310 (one sign on every seed).")


def test_quick_section_writes_both_tables(tmp_path):
    out = tmp_path / "b.md"
    assert main(["--quick", "--sections", "mla", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| mla_small | 32 | " in text  # the cache table's row
    for name in MODELS:
        assert f"| {name} | " in text  # the val-loss table's rows
    assert "has the lower val loss" in text and "seed noise" in text
