"""The training step's per-step work (issue 15): token ids are range-checked once per batch on the host (not
by a device sync inside forward), and values are logged only on the steps whose values reach the loggers."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import Logger

import zoo
from zoo.models.base import ZooModel
from zoo.training.callbacks import TokensPerSecond
from zoo.training.module import ZooLightningModule

VOCAB, T = 50, 8


class _Rows(Logger):
    """Keeps every log_metrics call: (step, keys)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int, set[str]]] = []

    name, version = "rows", "0"

    def log_metrics(self, metrics, step=None) -> None:
        self.rows.append((step, set(metrics)))

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass


def _batches(n: int, bad_at: int | None = None) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        ids = torch.randint(0, VOCAB, (2, T + 1), generator=gen)
        if i == bad_at:
            ids[1, 3] = VOCAB + 7
        out.append({"input_ids": ids[:, :-1], "targets": ids[:, 1:]})
    return out


def _fit(batches, *, steps: int, log_every: int, logger=False, callbacks=()) -> ZooLightningModule:
    model = zoo.build({"arch": "decoder", "vocab_size": VOCAB, "d_model": 16, "n_layers": 1, "n_heads": 2,
                       "max_seq_len": T})
    module = ZooLightningModule(model, task="lm", tokenizer=None, optim={"lr": 1e-3},
                                scheduler={"name": "constant", "warmup_steps": 0})
    trainer = L.Trainer(max_steps=steps, log_every_n_steps=log_every, logger=logger,
                        callbacks=list(callbacks), accelerator="cpu", enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        num_sanity_val_steps=0)
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    return module


def test_bad_token_id_in_a_batch_gets_the_clear_error(monkeypatch):
    built = []
    monkeypatch.setattr(ZooLightningModule, "configure_optimizers",
                        lambda self, original=ZooLightningModule.configure_optimizers: built.append(self)
                        or original(self))
    with pytest.raises(ValueError,
                       match=rf"input_ids holds token ids in \[\d+, {VOCAB + 7}\] but the vocabulary "
                             rf"is \[0, {VOCAB}\) \(model.vocab_size={VOCAB}\)"):
        _fit(_batches(3, bad_at=1), steps=3, log_every=1)
    model = built[0].model  # after the failed fit, forward checks ids itself again
    assert not model.inputs_checked_on_host
    with pytest.raises(ValueError, match="input_ids holds token ids"):
        model(torch.tensor([[1, VOCAB]]))


def test_ids_are_checked_once_per_batch_on_the_host(monkeypatch):
    calls: list[torch.device] = []
    original = ZooModel.check_id_range

    def spy(self, ids, name="input_ids"):
        calls.append(ids.device)
        return original(self, ids, name)

    monkeypatch.setattr(ZooModel, "check_id_range", spy)
    module = _fit(_batches(4), steps=4, log_every=1)
    assert len(calls) == 4  # the host check only; forward skipped its own
    assert not module.model.inputs_checked_on_host  # outside fit, forward checks again
    with pytest.raises(ValueError, match="input_ids holds token ids"):
        module.model(torch.tensor([[1, VOCAB]]))


def test_values_are_logged_together_on_logging_steps():
    logger = _Rows()
    _fit(_batches(6), steps=6, log_every=2, logger=logger, callbacks=[TokensPerSecond(window=2)])
    train_rows = [(step, keys) for step, keys in logger.rows if "train/loss" in keys]
    assert [step for step, _ in train_rows] == [1, 3, 5]  # Lightning's steps for log_every_n_steps=2
    for _, keys in train_rows:  # the grad norm and tokens/s of the same step, not of an earlier one
        assert {"train/ppl", "train/lr", "train/grad_norm", "train/tokens_per_s"} <= keys


def test_targets_labels_and_documents_are_checked_on_the_host():
    """A bad target (lm), label (classifier: its classes, not the vocabulary) or document order gets one clear
    error from the host check, which is what forward skips during fit."""
    batches = _batches(3)
    batches[1]["targets"] = batches[1]["targets"].clone()  # a view of the ids: change the targets only
    batches[1]["targets"][0, 2] = VOCAB + 3
    with pytest.raises(ValueError,
                       match=rf"targets hold values in \[\d+, {VOCAB + 3}\]; allowed are \[0, {VOCAB}\)"):
        _fit(batches, steps=3, log_every=1)
    classifier = zoo.build({"arch": "encoder", "head": {"name": "classifier", "num_labels": 3},
                            "vocab_size": VOCAB, "d_model": 16, "n_layers": 1, "n_heads": 2,
                            "max_seq_len": T})
    ids = torch.ones(2, T, dtype=torch.long)
    with pytest.raises(ValueError, match=r"labels hold values in \[0, 3\]; allowed are \[0, 3\)"):
        classifier.check_values({"input_ids": ids, "labels": torch.tensor([0, 3])})
    classifier.check_values({"input_ids": ids, "labels": torch.tensor([0, 2])})
    with pytest.raises(ValueError, match="document_ids must not decrease along a row"):
        classifier.check_values({"input_ids": ids,
                                 "document_ids": torch.tensor([[0] * T, [1] * 4 + [0] * (T - 4)])})
    classifier.inputs_checked_on_host = True  # forward skips the value checks, not the shape checks
    assert classifier(ids, labels=torch.tensor([0, 2])).loss is not None
    with pytest.raises(ValueError, match=r"labels must be an integer tensor of shape \(2,\)"):
        classifier(ids, labels=torch.tensor([0, 2, 1]))
