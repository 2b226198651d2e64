"""bench/bench_hybrid.py: the cache bytes it reports, counted by hand from the shapes; the hybrids' SwiGLU
widths giving the attention model's parameter count within one width step; the win / lose sentence from
hand-made numbers; and the --quick section running end to end and writing its two tables."""

from __future__ import annotations

import statistics

import torch

from bench.bench_hybrid import SIZES, build, cache_bytes, matched_widths, prefill, variants, verdict
from bench.run import main

QUICK = SIZES[True]  # d_model 32, 4 layers, attention 4 query / 2 KV heads of 8


def test_cache_bytes_by_hand():
    """10 prompt tokens. Attention layer: K and V (1, 2 KV heads, 10, 8) fp32 = 1,280 B held, a 64-position
    buffer allocated (8,192 B). Gated DeltaNet layer: the convolution window (1, 3, 2*2*8 + 4*8 = 64) and the
    state (1, 4, 8, 8): 1,792 B. Short-conv layer: its window (1, 2, 32): 256 B."""
    expected = {"attention": (4 * 1280, 4 * 8192, 0),
                "Gated DeltaNet 3:1": (3 * 1792 + 1280, 3 * 1792 + 8192, 3 * 1792),
                "short conv (LFM2)": (3 * 256 + 1280, 3 * 256 + 8192, 3 * 256)}
    prompt = torch.randint(3, 64, (1, 10))
    for name, keys in variants(QUICK).items():
        model = build(QUICK, keys, QUICK.d_ff, 64, 32).eval()
        cache, first, _ = prefill(model, prompt)
        assert cache_bytes(cache) == expected[name], name
        assert first.shape == (1, 1)


def test_hybrid_widths_match_the_attention_parameter_count():
    widths = matched_widths(QUICK, 300)
    assert widths["attention"] == QUICK.d_ff
    counts = {name: build(QUICK, keys, widths[name], 300, 32).num_parameters()
              for name, keys in variants(QUICK).items()}
    step = 3 * QUICK.d_model * QUICK.n_layers  # one more unit of SwiGLU width on every layer
    for name in ("Gated DeltaNet 3:1", "short conv (LFM2)"):
        assert widths[name] < QUICK.d_ff  # the linear mixers are the larger: the FFN gives way
        assert abs(counts[name] - counts["attention"]) <= step / 2, (name, counts)


def test_verdict_reads_the_numbers():
    trained = {"attention": [{"val": 3.00, "tok_s": 100.0}, {"val": 3.02, "tok_s": 100.0}],
               "gdn": [{"val": 2.90, "tok_s": 50.0}, {"val": 2.92, "tok_s": 50.0}],
               "conv": [{"val": 3.01, "tok_s": 120.0}, {"val": 3.02, "tok_s": 120.0}]}
    decoded = {512: {"attention": {"tok_s": 200.0, "bytes": (1000, 2000, 0)},
                     "gdn": {"tok_s": 100.0, "bytes": (500, 600, 10)},
                     "conv": {"tok_s": 100.0, "bytes": (500, 600, 10)}},
               4096: {"attention": {"tok_s": 100.0, "bytes": (8000, 16000, 0)},
                      "gdn": {"tok_s": 150.0, "bytes": (2000, 2100, 10)},
                      "conv": {"tok_s": 105.0, "bytes": (2000, 2100, 10)}}}
    assert verdict("gdn", trained, decoded) == (
        "**gdn** wins: val loss lower than attention's by 0.100; decodes at 1.50x attention's tokens/s at "
        "4,096; holds 4.0x less cache at 4,096. Loses: trains at 0.50x attention's tokens/s; decodes at "
        "0.50x attention's tokens/s at 512.")
    spread = statistics.stdev([3.00, 3.02])  # conv's gap (0.005) is inside it: neither a win nor a loss
    assert verdict("conv", trained, decoded) == (
        "**conv** wins: trains at 1.20x attention's tokens/s; holds 4.0x less cache at 4,096. Loses: decodes "
        f"at 0.50x attention's tokens/s at 512. Even: val loss within the seed spread (± {spread:.3f}) of "
        "attention's; decodes at 1.05x attention's tokens/s at 4,096.")  # within SAME_SPEED of 1


def test_quick_section_writes_its_tables(tmp_path):
    out = tmp_path / "b.md"
    assert main(["--quick", "--sections", "hybrid", "--out", str(out)]) == 0
    text = out.read_text()
    assert "## Hybrids: attention vs Gated DeltaNet 3:1 vs short conv (LFM2)" in text
    for name in variants(QUICK):
        assert f"| {name} | " in text  # the training table's row
        for context in QUICK.contexts:
            assert f"| {context:,} | {name} | " in text  # one decode row per context and model
    assert "**Gated DeltaNet 3:1** wins:" in text and "**short conv (LFM2)** wins:" in text
    assert ("Gated DeltaNet 3:1: 5.2 KiB of fixed entries at every context, and K/V on 1 attention layer(s) "
            "of 4, so at most 4.0x less cache") in text  # 3 layers x 1,792 B (test_cache_bytes_by_hand)
