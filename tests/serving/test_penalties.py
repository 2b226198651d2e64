"""Presence / frequency penalties and logit bias on hand-worked numbers (OpenAI's formula)."""

from __future__ import annotations

import torch

from zoo.generation.continuous.penalties import Penalties


def test_penalties_and_bias_by_hand():
    logits = torch.tensor([1.0, 2.0, 3.0, 0.0])
    p = Penalties(frequency=0.5, presence=0.25, bias={0: 5.0, 3: -100.0})
    assert p.apply(logits).tolist() == [6.0, 2.0, 3.0, -100.0]  # nothing generated yet: the bias only
    for token in (2, 2, 1):
        p.count(token)
    # c = [0, 1, 2, 0]: token 1 loses 0.5 + 0.25, token 2 loses 2 * 0.5 + 0.25
    assert p.apply(logits).tolist() == [6.0, 1.25, 1.75, -100.0]
    assert logits.tolist() == [1.0, 2.0, 3.0, 0.0]  # the raw logits are left alone
    negative = Penalties(frequency=-1.0, presence=-0.5)
    negative.apply(logits)
    negative.count(0)
    assert negative.apply(logits).tolist() == [2.5, 2.0, 3.0, 0.0]  # negative values favour repeats
