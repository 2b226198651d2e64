"""evaluate.py split=val scores what training validated on: the val/loss a run prints equals evaluate()'s
loss on the run's checkpoint, with the trainer's default validation limit (conf/trainer/default.yaml), on a
validation split of many more batches than the old limit of 20."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from zoo.evaluation.run import evaluate
from zoo.training.run import train

from .conftest import CONF

# gpt_nano on a 20 KB slice of the stdlib corpus, 16-token windows, 2 per batch: a validation split of
# far more than 20 batches; one validation, at the last step (last.ckpt holds the weights it scored)
DATA = ["data=stdlib_text", "data.max_bytes=20000"]
RUN = [*DATA, "model=gpt_nano", "tokenizer.vocab_size=300", "model.max_seq_len=16", "batch_size=2",
       "logger=csv", "trainer.accelerator=cpu", "trainer.max_steps=4", "eval_every=4",
       "trainer.num_sanity_val_steps=0", "trainer.enable_progress_bar=false", "callbacks.samples=null",
       "optim.lr=3e-3", "scheduler.warmup_steps=1"]


def test_printed_val_loss_equals_evaluate_split_val(tmp_path, make_eval_cfg):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[*RUN, f"paths.output_dir={tmp_path / 'run'}",
                                           f"paths.runs_dir={tmp_path}", f"paths.cache_dir={tmp_path / 'c'}"])
    result = train(cfg)
    report = evaluate(make_eval_cfg([f"ckpt={result.last_checkpoint}", *DATA, "split=val", "batch_size=5",
                                     "output=null"]))
    windows = report.metrics["windows"]
    assert windows > 20 * 2  # more than the old trainer.limit_val_batches=20 batches of 2 windows
    assert report.metrics["loss"] == pytest.approx(result.metrics["val/loss"], rel=1e-5)
