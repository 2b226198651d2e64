"""The decoding benchmark's bytes per step, against counts by hand: a step reads every matrix, bias and norm
once; an embedding table only when the head reads it whole (tied), never a looked-up positional table."""

from __future__ import annotations

import zoo
from bench.decoding_limit import kv_bytes, step_weight_bytes

F32 = 4


def test_tied_gpt_counts_the_table_once_and_not_positions():
    d, layers, vocab, ff = 16, 2, 50, 64
    model = zoo.build("gpt_small", d_model=d, n_layers=layers, n_heads=2, vocab_size=vocab, max_seq_len=32,
                      ffn_ratio=ff // d)
    # qkv, o, up, down with biases; two LayerNorms (weight + bias)
    per_layer = (d * 3 * d + 3 * d) + (d * d + d) + (d * ff + ff) + (ff * d + d) + 2 * (2 * d)
    expected = layers * per_layer + 2 * d + vocab * d  # final LN, the tied table (read by the head)
    assert step_weight_bytes(model) == expected * F32


def test_untied_llama_counts_the_head_not_the_table():
    d, layers, vocab, ff, heads, kv = 16, 2, 50, 24, 4, 2
    model = zoo.build("llama_small", d_model=d, n_layers=layers, n_heads=heads, n_kv_heads=kv, d_ff=ff,
                      vocab_size=vocab)
    hd = d // heads
    per_layer = d * (d + 2 * kv * hd) + d * d + d * 2 * ff + ff * d + 2 * d  # qkv o gate-up down, 2 RMSNorm
    assert step_weight_bytes(model) == (layers * per_layer + d + vocab * d) * F32  # final norm, head
    # K and V of every layer, kv heads x head size per position, per row
    assert kv_bytes(model, batch=3, positions=10) == 2 * layers * 3 * kv * hd * 10 * F32
