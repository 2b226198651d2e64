"""Which step `last.ckpt` and `best.ckpt` hold: last = the latest validation or the end of fit, best = the
lowest finite val/loss; a NaN/inf validation is reported (stop, or a warning) and never becomes best."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest
import torch

from zoo.apps import ConfigError
from zoo.checkpoint import read_checkpoint
from zoo.training.callbacks import NonFiniteLossError, ZooCheckpoint
from zoo.training.checkpoint_io import AtomicCheckpointIO
from zoo.training.module import ValidationLoss, ZooLightningModule
from zoo.training.run import train

from .conftest import TINY_LM

pytestmark = pytest.mark.e2e  # trains, spawns processes or drives a browser: outside the inner loop


def patch_val_loss(monkeypatch, change) -> None:
    """Validation batches see `change(module, batch_idx, loss) -> loss` applied to the task's batch loss."""
    original = ZooLightningModule.validation_step

    def patched(self, batch, batch_idx):
        task = self.task
        real = type(task).loss
        # shadows the method, this call only
        task.loss = lambda out, b: change(self, batch_idx, real(task, out, b))
        try:
            return original(self, batch, batch_idx)
        finally:
            del task.loss

    monkeypatch.setattr(ZooLightningModule, "validation_step", patched)


def worsening(module, batch_idx, loss):
    """val/loss grows with the step: no validation after the first improves on it."""
    return loss + module.global_step


def saved_step(path) -> int:
    return read_checkpoint(path)["global_step"]


def test_last_is_the_final_step_and_a_finished_run_is_not_resumed(make_cfg, monkeypatch):
    patch_val_loss(monkeypatch, worsening)
    common = [*TINY_LM, "trainer.max_steps=7", "eval_every=3"]  # validations at 3 and 6, fit ends at 7
    first = train(make_cfg(common, run="first"))
    assert saved_step(first.best_checkpoint) == 3  # the best val/loss
    assert saved_step(first.last_checkpoint) == 7  # the latest state, though val/loss never improved
    again = make_cfg([*common, "ckpt_path=last"], run="again")
    with pytest.raises(ConfigError, match=r"is finished: it is at step 7 and trainer.max_steps=7, so "
                                          r"nothing would train. To train on, resume with a larger "
                                          r"trainer.max_steps"):
        train(again)  # it would retrain nothing (tests/training/test_resume_refusals.py)
    assert not Path(again.paths.output_dir).exists()


def test_an_improving_validation_writes_its_state_once_for_best_and_last(make_cfg, monkeypatch):
    """Validations at 3 and 6 improve, 9 does not: at 3 and 6 best.ckpt is serialised and last.ckpt is the
    same file (a hard link), not a second write of the same state; at 9 last.ckpt alone is written, and
    best.ckpt keeps step 6 intact. 3 checkpoint writes where there were 5."""
    patch_val_loss(monkeypatch, lambda m, i, loss: loss + (100.0 if m.global_step >= 9 else -m.global_step))
    written = []
    save = AtomicCheckpointIO.save_checkpoint
    monkeypatch.setattr(AtomicCheckpointIO, "save_checkpoint", lambda self, ckpt, path, *a, **k:
                        written.append(Path(path).name) or save(self, ckpt, path))
    shared = []
    on_validation_end = ZooCheckpoint.on_validation_end

    def record(self, trainer, module):
        on_validation_end(self, trainer, module)
        folder = Path(self.dirpath)
        shared.append(os.path.samefile(folder / "best.ckpt", folder / "last.ckpt"))

    monkeypatch.setattr(ZooCheckpoint, "on_validation_end", record)
    result = train(make_cfg([*TINY_LM, "trainer.max_steps=9", "eval_every=3", "callbacks.samples=null"]))
    assert written == ["best.ckpt", "best.ckpt", "last.ckpt"] and shared == [True, True, False]
    assert saved_step(result.best_checkpoint) == 6 and saved_step(result.last_checkpoint) == 9


def test_non_finite_training_stop_keeps_the_latest_validation(make_cfg, monkeypatch):
    patch_val_loss(monkeypatch, worsening)
    original = ZooLightningModule.training_step

    def poisoned(self, batch, batch_idx):
        loss = original(self, batch, batch_idx)
        return loss * float("nan") if self.global_step == 7 else loss

    monkeypatch.setattr(ZooLightningModule, "training_step", poisoned)
    cfg = make_cfg([*TINY_LM, "trainer.max_steps=9", "eval_every=3"])
    with pytest.raises(NonFiniteLossError, match="at step 7"):
        train(cfg)
    assert saved_step(f"{cfg.paths.output_dir}/checkpoints/last.ckpt") == 6  # not the best (3): the latest


def test_nan_validation_stops_before_its_checkpoints(make_cfg, monkeypatch):
    patch_val_loss(monkeypatch,
                   lambda m, i, loss: loss * float("nan") if m.global_step == 6 and i == 1 else loss)
    cfg = make_cfg([*TINY_LM, "trainer.max_steps=9", "eval_every=3"])
    with pytest.raises(NonFiniteLossError,
                       match=r"non-finite validation loss \(val/loss=nan\) at step 6: 1 of 2"):
        train(cfg)
    checkpoints = f"{cfg.paths.output_dir}/checkpoints"
    assert saved_step(f"{checkpoints}/last.ckpt") == 3 and saved_step(f"{checkpoints}/best.ckpt") == 3


def test_nan_validation_without_the_stop_warns_and_is_never_best(make_cfg, monkeypatch):
    patch_val_loss(monkeypatch, lambda m, i, loss: loss * float("nan"))  # every batch, every validation
    cfg = make_cfg([*TINY_LM, "trainer.max_steps=3", "eval_every=3", "callbacks.non_finite=null"])
    with pytest.warns(UserWarning, match=r"val/loss=nan at step 3: best.ckpt is not updated"):
        result = train(cfg)
    assert math.isnan(result.metrics["val/loss"])  # reported as NaN, not averaged over the finite batches
    assert result.best_checkpoint is None and saved_step(result.last_checkpoint) == 3


def test_validation_loss_keeps_nan_batches_and_skips_empty_ones():
    metric = ValidationLoss()
    metric.update(torch.tensor(float("nan")), torch.tensor(0))  # an MLM batch with no masked token: 0/0
    metric.update(torch.tensor(2.0), torch.tensor(1))
    metric.update(torch.tensor(1.0), torch.tensor(3))
    summary = metric.compute()
    assert summary["loss"] == pytest.approx(1.25) and summary["batches"] == 2 and summary["non_finite"] == 0
    metric.update(torch.tensor(float("inf")), torch.tensor(2))
    summary = metric.compute()
    assert math.isinf(summary["loss"]) and summary["batches"] == 3 and summary["non_finite"] == 1


def test_temp_files_of_killed_checkpoint_saves_are_removed_on_the_next_run(make_cfg, tmp_path):
    old_run = tmp_path / "runs" / "runs" / "2024-01-01_00-00-00" / "checkpoints"  # the real layout's depth
    old_run.mkdir(parents=True)
    hour_ago = time.time() - 3700
    stale, fresh = old_run / ".last.ckpt.k2j_x9ab.tmp", old_run / ".best.ckpt.q8w3e4rt.tmp"
    notes, last = old_run / ".notes.tmp", old_run / "last.ckpt"
    for path in (stale, fresh, notes, last):
        path.write_bytes(b"x" * 1000)
    for path in (stale, notes, last):
        os.utime(path, (hour_ago, hour_ago))
    train(make_cfg([*TINY_LM, "trainer.max_steps=1", "eval_every=1", "callbacks.samples=null"]))
    assert not stale.exists()  # untouched for an hour: its save was killed
    assert fresh.exists() and notes.exists() and last.exists()  # maybe a live save; not zoo temps
