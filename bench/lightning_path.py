"""The training app's Lightning path as a benchmark side: `train.py`'s composed config (`trainer=cpu`),
its `trainer_kwargs`, its per-step callbacks (progress bar, tokens/s, non-finite stop) and
`ZooLightningModule`, driven by `Trainer.fit` for a few steps on one repeated batch.

A callback times the steps after the first (which builds the optimizer state), so Trainer set-up is
excluded but every per-step cost of the stack (hooks, logging, grad-norm, clipping, the dataloader) is
counted. Left out: validation, checkpoints and end-of-fit samples (not per-step) and the W&B logger."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import lightning as L
import torch
from omegaconf import OmegaConf

from bench.common import SelfTimed
from zoo.presets import config_root
from zoo.training.callbacks import CallbackContext, build_callbacks
from zoo.training.module import ZooLightningModule
from zoo.training.plan import trainer_kwargs
from zoo.utils import IGNORE_INDEX

PER_STEP_CALLBACKS = ("progress_bar", "tokens_per_s", "non_finite")


def train_config() -> dict[str, Any]:
    """train.py's root config composed with `trainer=cpu logger=none`: the parts a training step uses
    (trainer, optim, scheduler, callbacks), as plain data (paths need a Hydra run and are left out)."""
    from hydra import compose, initialize_config_dir

    from zoo.training.hydra_configs import register_train_configs

    register_train_configs()

    with initialize_config_dir(config_dir=str(config_root()), version_base="1.3"):
        cfg = compose("config", overrides=["trainer=cpu", "logger=none"])
    return {key: OmegaConf.to_container(cfg[key], resolve=True)
            for key in ("trainer", "optim", "scheduler", "callbacks")}


class _RepeatBatch(torch.utils.data.IterableDataset):
    """The same batch `n` times (the DataLoader adds no collation: batch_size=None)."""

    def __init__(self, batch: Mapping[str, torch.Tensor], n: int) -> None:
        self.batch, self.n = dict(batch), n

    def __iter__(self):
        for _ in range(self.n):
            yield self.batch


class _StepClock(L.Callback):
    """Wall time from the start of batch `skip` to the end of the last batch."""

    def __init__(self, skip: int) -> None:
        self.skip, self.start, self.end = skip, 0.0, 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == self.skip:
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.end = time.perf_counter()


def task_of(model: torch.nn.Module) -> str:
    return "lm" if model.config.arch == "decoder" else "seq2seq"


def lightning_step(
    model: torch.nn.Module, batch: Mapping[str, torch.Tensor], cfg: Mapping[str, Any], *, steps: int = 1
) -> Callable[[], SelfTimed]:
    """A closure running `steps` + 1 training steps through `Trainer.fit`; it reports the seconds of the
    last `steps`, so the caller divides by `steps` like the bare loop's calls."""
    task = task_of(model)
    if task == "lm":  # the lm task trains on `targets` (the next tokens); the same loss as `labels=input_ids`
        labels = batch["labels"]
        targets = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)
        batch = {**{k: v for k, v in batch.items() if k != "labels"}, "targets": targets}
    module = ZooLightningModule(model, task=task, tokenizer=None, optim=cfg["optim"],
                                scheduler=cfg["scheduler"])
    kwargs = trainer_kwargs(cfg["trainer"])
    kwargs.update(max_steps=steps + 1, limit_val_batches=0, num_sanity_val_steps=0)
    ctx = CallbackContext(task, checkpoint_dir=None, tokenizer=None, datamodule=None)
    per_step = {name: cfg["callbacks"][name] for name in PER_STEP_CALLBACKS
                if cfg["callbacks"].get(name) is not None}

    def run() -> SelfTimed:
        clock = _StepClock(skip=1)
        trainer = L.Trainer(**kwargs, logger=False, enable_checkpointing=False,
                            callbacks=[*build_callbacks(per_step, ctx), clock])
        loader = torch.utils.data.DataLoader(_RepeatBatch(batch, steps + 1), batch_size=None)
        trainer.fit(module, train_dataloaders=loader)
        return SelfTimed(clock.end - clock.start)

    return run
