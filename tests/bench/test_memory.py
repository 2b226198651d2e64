"""The memory section's peak accounting against a hand count: live tensor bytes at their highest point."""

from __future__ import annotations

import torch

from bench.bench_memory import make_step, peak_bytes


def test_peak_bytes_counts_live_tensors_at_their_highest_point():
    def step():
        a = torch.empty(1000, 1000)  # 4,000,000 bytes
        b = torch.empty(500, 1000)  # + 2,000,000 while a lives: the peak
        del a, b
        c = torch.empty(1000, 1000, dtype=torch.float64)  # 8,000,000 alone
        del c

    assert peak_bytes(step) == 8_000_000
    assert peak_bytes(lambda: torch.ones(100, 100)) == 40_000


def test_chunked_loss_lowers_the_peak_of_a_training_step():
    size = {"n_layers": 1, "d_model": 16, "n_heads": 2, "vocab_size": 2048, "batch": 2, "seq_len": 32,
            "chunk": 8}
    plain, chunked = make_step(size, False, False), make_step(size, False, True)
    assert abs(plain() - chunked()) < 1e-5  # warm-up: the same loss, gradients allocated
    logits = 2 * 32 * 2048 * 4
    assert peak_bytes(plain) > 2 * logits > peak_bytes(chunked)
