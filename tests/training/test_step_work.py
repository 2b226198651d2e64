"""Work done once instead of every step (issue 42): a model without MoE layers is not scanned for them on
every training step (balancing losses, router load, router updates, routing summary): the module finds its MoE
layers once, when it is built. tests/training/test_moe_run.py trains the MoE models."""

from __future__ import annotations

import zoo.modules.moe.steps as moe_steps
from tests.training.test_hot_path import _batches, _fit


def test_a_dense_model_is_not_scanned_for_moe_layers_every_step(monkeypatch):
    scans = []
    original = moe_steps.moe_layers
    monkeypatch.setattr(moe_steps, "moe_layers", lambda model: scans.append(1) or original(model))
    module = _fit(_batches(4), steps=4, log_every=1)
    assert module.trainer.global_step == 4
    assert len(scans) <= 1  # at most once, when the module is built
