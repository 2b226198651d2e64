"""bench/bench_decode_large.py: the bytes a decode step reads, counted by hand from the layer shapes for fp32,
int8 and int4 (tied head counted once, the embedding lookup not at all)."""

from __future__ import annotations

import collections
import copy

import torch

import zoo
from bench.bench_decode_large import kv_bytes_per_token, matmuls_alone, weight_bytes_per_token
from zoo.quantization.linear import QuantizedLinear


def test_weight_bytes_per_token_by_hand():
    torch.manual_seed(0)
    d, ff, vocab, layers, kv_heads, head = 64, 128, 512, 2, 2, 16
    model = zoo.build("qwen2_5_0_5b", d_model=d, n_layers=layers, n_heads=4, n_kv_heads=kv_heads, d_ff=ff,
                      vocab_size=vocab).eval()
    qkv_out = d + 2 * kv_heads * head  # q, k, v rows (biases on all three)
    # (out, in) of every linear a step runs: qkv, o, up (gate and value fused), down; the tied head
    linears = [(qkv_out, d), (d, d), (2 * ff, d), (d, ff)] * layers + [(vocab, d)]
    norms = (2 * layers + 1) * d  # two RMSNorm weights a layer, and the final one
    biases = qkv_out * layers
    fp32 = 4 * (sum(n * k for n, k in linears) + norms + biases)
    assert weight_bytes_per_token(model) == fp32
    int8 = zoo.quantize(copy.deepcopy(model), "int8")  # a byte a weight, a bf16 scale a row
    assert weight_bytes_per_token(int8) == sum(n * k + 2 * n for n, k in linears) + 4 * (norms + biases)
    int4 = zoo.quantize(copy.deepcopy(model), "int4", group_size=32)
    # codes: half a byte a weight; a bf16 scale and zero per group of 32
    per_layer = sum(n * k // 2 + (k // 32) * n * 4 for n, k in linears)
    assert weight_bytes_per_token(int4) == per_layer + 4 * (norms + biases)
    assert kv_bytes_per_token(model, 10) == 2 * layers * kv_heads * head * 10 * 4


def test_matmuls_alone_runs_every_linear_once_per_pass():
    """The kernels' ceiling row times each linear layer of a step (quantised ones and the head included) once
    per pass, after one warm pass, and nothing else."""
    torch.manual_seed(0)
    model = zoo.build("qwen2_5_0_5b", d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128,
                      vocab_size=512).eval()
    for built in (model, zoo.quantize(copy.deepcopy(model), "int4", group_size=32)):
        calls: collections.Counter = collections.Counter()
        for name, module in built.named_modules():
            if isinstance(module, torch.nn.Linear | QuantizedLinear):
                module.register_forward_hook(lambda m, i, o, name=name, calls=calls: calls.update([name]))
        assert matmuls_alone(built, passes=3) > 0
        assert len(calls) == 4 * 2 + 1 and set(calls.values()) == {4}, calls
