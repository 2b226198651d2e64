"""The test split at the end of training (`callbacks.test`): when the data has one (translation_toy's
held-out combinations), the task's evaluation of the best checkpoint (the final weights without one) is
printed, logged as test/<metric> and returned in the run's metrics. A training callback like the others
(zoo.training.callbacks builds it, run.py reads its metrics); the evaluation itself is the task's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from zoo.tasks.evaluating import EvalOptions, available_splits


class TestSplitEvaluation(Callback):
    """`task.evaluate(..., "test", ...)` once fit ends (rank zero; skipped when fit was interrupted)."""

    def __init__(self, task, tokenizer, datamodule, *, max_examples: int | None = None,
                 generation: Mapping[str, Any] | None = None) -> None:
        self.task, self.tokenizer, self.datamodule = task, tokenizer, datamodule
        self.options = EvalOptions(max_examples, dict(generation or {}))
        self.metrics: dict[str, float] = {}
        self.evaluated: str | None = None  # which weights: the best checkpoint's path or "final weights"

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.interrupted or not trainer.is_global_zero or trainer.fast_dev_run \
                or "test" not in available_splits(self.datamodule):
            return
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        if best:
            from zoo.loader import load

            model, _ = load(best)
            model.to(pl_module.device)
            self.evaluated = best
        else:
            from zoo.training.sharding import whole_model

            model, self.evaluated = whole_model(trainer, pl_module), "final weights"
            if model is None:
                print("test split skipped: the model is sharded and no checkpoint was written")
                return
        found = self.task.evaluate(model, self.tokenizer, self.datamodule, "test", self.options)
        self.metrics = {f"test/{name}": float(value) for name, value in found.items()}
        print(f"\n=== test split ({self.evaluated}) ===")
        for name, value in self.metrics.items():
            print(f"{name}: {value:.4f}")
        for logger in trainer.loggers:
            logger.log_metrics(self.metrics, step=trainer.global_step)
