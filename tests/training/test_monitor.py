"""callbacks.checkpoint.monitor: best.ckpt follows any metric logged at validation, in either direction; the
names a run logs are known before it starts (a name never logged is refused: tests/training/bad_inputs.py)."""

from __future__ import annotations

import pytest

from zoo.tasks import TASKS
from zoo.training.monitor import check_monitor, monitorable_metrics
from zoo.training.run import train

from .conftest import TINY_LM
from .test_checkpoints import patch_val_loss, saved_step, worsening


def test_best_follows_the_monitored_metric_and_mode(make_cfg, monkeypatch):
    patch_val_loss(monkeypatch, worsening)  # val/loss (and val/ppl) grow: step 3 is the lowest, 6 the highest
    common = [*TINY_LM, "trainer.max_steps=6", "eval_every=3", "callbacks.samples=null"]
    lowest = train(make_cfg([*common, "callbacks.checkpoint.monitor=val/ppl"], run="min"))
    highest = train(make_cfg([*common, "callbacks.checkpoint.monitor=val/ppl",
                              "callbacks.checkpoint.mode=max"],
                             run="max"))
    assert saved_step(lowest.best_checkpoint) == 3
    assert saved_step(highest.best_checkpoint) == 6


@pytest.mark.parametrize(("task", "logged", "not_logged"), [
    ("lm", ["val/loss", "val/ppl"], ["val/bleu", "val/accuracy", "train/loss"]),
    ("mlm", ["val/loss", "val/ppl"], ["val/exact_match"]),
    ("seq2seq", ["val/loss", "val/exact_match", "val/bleu", "val/chrf"], ["val/accuracy"]),
    ("classification", ["val/loss", "val/accuracy"], ["val/ppl", "val/bleu"]),
])
def test_each_task_names_what_it_logs(task, logged, not_logged):
    names = monitorable_metrics(TASKS.get(task), {"exact_match": {"max_examples": 10}})
    assert set(logged) <= set(names) and not set(not_logged) & set(names)


def test_reference_metrics_need_their_callback():
    seq2seq = TASKS.get("seq2seq")
    check_monitor({"checkpoint": {"monitor": "val/bleu"}, "exact_match": {}}, seq2seq)
    with pytest.raises(ValueError, match="logged by the exact_match callback, which is switched off"):
        check_monitor({"checkpoint": {"monitor": "val/bleu"}, "exact_match": None}, seq2seq)
    check_monitor({"checkpoint": None}, TASKS.get("lm"))  # no checkpoint callback: nothing to check
