"""bench/bench_parity.py: the hand-written reference is the same run as zoo's (shape, parameters, init scale,
schedule), so that a gap between the two sides means a difference in training, not in set-up."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import zoo
from bench.bench_parity import QUICK, RefGPT, reference_lr, val_losses
from zoo.training.optim import lr_multiplier

SETUP = dataclasses.replace(QUICK, n_layers=2, steps=20, warmup=4)


def _zoo_model(vocab: int):
    return zoo.build({"arch": "decoder", "vocab_size": vocab, "d_model": SETUP.d_model,
                      "n_layers": SETUP.n_layers, "n_heads": SETUP.n_heads, "max_seq_len": SETUP.seq_len,
                      "dropout": SETUP.dropout, "activation": "gelu", "norm": "layernorm", "bias": True,
                      "tie_embeddings": True})


def test_reference_has_zoos_parameter_count_and_init_scale():
    torch.manual_seed(0)
    ref, ours = RefGPT(37, SETUP), _zoo_model(37)
    assert sum(p.numel() for p in ref.parameters()) == ours.num_parameters()
    # residual projections: std 0.02 / sqrt(2 * layers) on both sides (GPT-2), the rest 0.02
    want = 0.02 / math.sqrt(2 * SETUP.n_layers)
    assert ref.blocks[0].mlp_proj.weight.std().item() == pytest.approx(want, rel=0.15)
    assert ours.decoder_stack.layers[0].ffn.down.weight.std().item() == pytest.approx(want, rel=0.15)


def test_reference_schedule_is_zoos_cosine_with_warmup():
    multiplier = lr_multiplier({"name": "cosine", "warmup_steps": SETUP.warmup,
                                "min_lr_ratio": SETUP.min_lr_ratio},
                               SETUP.steps)
    for step in range(SETUP.steps + 3):
        assert reference_lr(step, SETUP) == pytest.approx(SETUP.lr * multiplier(step))


def test_val_losses_score_every_position_against_the_next_token():
    vocab, s = 5, dataclasses.replace(SETUP, seq_len=4, val_windows=2)
    val = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2, 3])  # windows [0..4] and [4..8]

    # logits: uniform except the last position, which is certain of its target
    def uniform_but_sure_of_last(ids):
        logits = torch.zeros(*ids.shape, vocab)
        logits[:, -1, :] = -1e9
        logits[0, -1, 4], logits[1, -1, 3] = 0.0, 0.0
        return logits

    every, but_last = val_losses(uniform_but_sure_of_last, val, s)
    assert but_last == pytest.approx(math.log(vocab))  # positions 0..T-2: uniform over 5
    assert every == pytest.approx(3 / 4 * math.log(vocab))  # the last position costs nothing
