"""Work done once instead of every step (issue 42): a model without MoE layers is not scanned for them on
every training step (balancing losses, router load, router updates, routing summary): the module finds its MoE
layers once, when it is built. tests/training/test_moe_run.py trains the MoE models."""

from __future__ import annotations

import zoo
import zoo.modules.moe.steps as moe_steps
from tests.training.test_hot_path import _batches, _fit


def test_a_dense_model_is_not_scanned_for_moe_layers_every_step(monkeypatch):
    scans = []
    original = moe_steps.moe_layers
    monkeypatch.setattr(moe_steps, "moe_layers", lambda model: scans.append(1) or original(model))
    module = _fit(_batches(4), steps=4, log_every=1)
    assert module.trainer.global_step == 4
    assert len(scans) <= 1  # at most once, when the module is built


def test_the_tokenizer_is_written_out_once_for_every_checkpoint_of_a_run(monkeypatch):
    """Each checkpoint stores the tokenizer's files (a resume compares them); they are written out once per
    run, not at every save (a temp folder written and read back: ~30 ms of each checkpoint)."""
    from zoo.tokenizers.texts import tokenizer_texts
    from zoo.tokenizers.tokenizer import ZooTokenizer
    from zoo.tokenizers.trained import train_char
    from zoo.training.module import ZooLightningModule

    tokenizer = train_char(["abcdef"])
    expected = tokenizer_texts(tokenizer)
    model = zoo.build({"arch": "decoder", "vocab_size": tokenizer.vocab_size, "d_model": 16, "n_layers": 1,
                       "n_heads": 2, "max_seq_len": 8})
    module = ZooLightningModule(model, task="lm", tokenizer=tokenizer, optim={"lr": 1e-3},
                                scheduler={"name": "constant", "warmup_steps": 0})
    saves = []
    original = ZooTokenizer.save
    monkeypatch.setattr(ZooTokenizer, "save",
                        lambda self, *a, **k: saves.append(1) or original(self, *a, **k))
    checkpoints = [{} for _ in range(3)]
    for checkpoint in checkpoints:
        module.on_save_checkpoint(checkpoint)
    assert len(saves) == 1
    assert all(c["zoo"]["tokenizer_files"] == expected for c in checkpoints)
