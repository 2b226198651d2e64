"""zoo/modules/mask.py's `real_tokens`: which of the new tokens are real (1.0) or pads (0.0), read off the
mask the stack built once, for the recurrent and convolution mixers (which zero pads so a left-padded row
gives what the row alone gives). Hand-worked masks: padding, an additive bias, a decoding step, a window."""

from __future__ import annotations

import torch

from zoo.modules.mask import build_mask, real_tokens


def test_left_pads_are_zero_and_every_real_token_one():
    key_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    mask = build_mask(key_mask, causal=True, q_len=5, k_len=5)
    assert real_tokens(mask, 2, 5).tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]


def test_an_additive_bias_mask_reads_minus_infinity_as_a_pad():
    bias = torch.zeros(1, 2, 4, 4)  # (1, H, Tq, Tk), finite everywhere: only padding and causality mask
    mask = build_mask(torch.tensor([[0, 1, 1, 1]]), causal=True, q_len=4, k_len=4, bias=bias)
    assert mask.mask.dtype == torch.float32
    assert real_tokens(mask, 1, 4).tolist() == [[0, 1, 1, 1]]


def test_a_decoding_step_reads_the_last_key_only():
    """One new token after 5 cached ones: the mask covers 6 keys, the new token is the last one."""
    key_mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    mask = build_mask(key_mask, causal=True, q_len=1, k_len=6)
    assert real_tokens(mask, 2, 1).tolist() == [[1], [1]]


def test_nothing_masked_is_none_and_a_batch_shared_mask_expands():
    assert real_tokens(build_mask(None, causal=True, q_len=3, k_len=3), 2, 3) is None
    windowed = build_mask(None, causal=True, q_len=3, k_len=3, window=2, window_only=True)  # (Tq, Tk)
    assert windowed.mask.dim() == 2
    assert real_tokens(windowed, 2, 3).tolist() == [[1, 1, 1], [1, 1, 1]]
