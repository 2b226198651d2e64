"""task=classification on a decoder (reward models, Llama/Qwen classifiers): the batches are right-padded with
an attention mask, the model pools each row's last real token, and a training step runs."""

from __future__ import annotations

import math

import lightning as L
import torch

from zoo.presets import build
from zoo.tasks import build_data
from zoo.training.module import ZooLightningModule
from zoo.training.plan import prepare

from .conftest import TINY_MODEL, compose_cfg, tiny_data


def test_decoder_classifier_trains_on_right_padded_batches(tmp_path, cache_dir, task_files):
    plan = prepare(compose_cfg([*TINY_MODEL, "model.head=classifier", *tiny_data("labelled", task_files)],
                               tmp_path, cache_dir))
    assert plan.task.name == "classification" and plan.model.arch == "decoder"  # task=auto picks it
    tokenizer, datamodule = build_data(plan.data_cfg, plan.tokenizer_cfg, task=plan.task,
                                       max_seq_len=plan.model.max_seq_len, batch_size=4,
                                       cache_dir=plan.resolved["paths"]["cache_dir"], seed=0)
    model = build(plan.task.model_config(plan.model, tokenizer)).eval()
    batch = next(iter(datamodule.val_dataloader()))
    mask, ids = batch["attention_mask"], batch["input_ids"]
    lengths = mask.sum(1)
    assert lengths.min() < ids.shape[1]  # some rows are padded, so the pooled position matters
    # padding on the right
    assert torch.equal(mask, (torch.arange(ids.shape[1])[None] < lengths[:, None]).long())
    with torch.no_grad():
        out = model(**plan.task.model_inputs(batch))
    last = out.hidden_states[torch.arange(len(ids)), lengths - 1]  # each row's last real token
    torch.testing.assert_close(out.logits, last @ model.head.proj.weight.T)  # a decoder's score: no bias

    module = ZooLightningModule(model.train(), task=plan.task.name, tokenizer=tokenizer,
                                optim=plan.resolved["optim"], scheduler=plan.resolved["scheduler"])
    trainer = L.Trainer(accelerator="cpu", max_steps=1, val_check_interval=1, check_val_every_n_epoch=None,
                        limit_val_batches=1, num_sanity_val_steps=0, logger=False, log_every_n_steps=1,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, datamodule=datamodule)
    assert math.isfinite(float(trainer.callback_metrics["train/loss"]))
    assert 0.0 <= float(trainer.callback_metrics["val/accuracy"]) <= 1.0
