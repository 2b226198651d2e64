"""memory.* through train(): activation checkpointing and the chunked loss train the same model as the
plain run (same losses step by step, same final weights up to float rounding)."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.training.run import train

from .conftest import TINY_LM, train_losses


def test_memory_levers_train_the_same_model(make_cfg):
    common = [*TINY_LM, "trainer.max_steps=3", "eval_every=3", "model.dropout=0.1", "callbacks.samples=null"]
    plain = train(make_cfg(common, run="plain"))
    levers = train(make_cfg([*common, "memory.activation_checkpointing=true", "memory.loss_chunk_size=50"],
                            run="levers"))
    expected, got = train_losses(plain.output_dir), train_losses(levers.output_dir)
    assert len(expected) == 3 and expected.keys() == got.keys()
    for step in expected:
        assert got[step] == pytest.approx(expected[step], rel=1e-5), step
    assert levers.metrics["val/loss"] == pytest.approx(plain.metrics["val/loss"], rel=1e-5)
    a, _ = zoo.load(plain.last_checkpoint)
    b, _ = zoo.load(levers.last_checkpoint)
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5, msg=name)
