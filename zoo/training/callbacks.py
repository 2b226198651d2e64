"""Training callbacks, built by name from `conf/callbacks/*.yaml` through the CALLBACKS registry:
checkpoints (last = latest, best = best finite monitored metric), tokens/s, a non-finite-loss stop, validation
exact-match for tasks with reference texts, and generated samples at the end (printed and logged as a
table)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, RichProgressBar
from lightning.pytorch.utilities import rank_zero_warn

from zoo.atomic import atomic_same_file
from zoo.options import integer
from zoo.registry import Registry
from zoo.tasks import Task, get_task
from zoo.tasks.samples import make_samples
from zoo.training.callback_options import (  # noqa: F401  (check_callbacks: here for its users)
    CALLBACK_OPTIONS,
    callback_settings,
    check_callbacks,
    register_callback_configs,
)
from zoo.training.checkpoint_io import writes_one_file
from zoo.training.console import LineProgress, trained_tokens
from zoo.training.distributed import data_parallel_world

CALLBACKS: Registry = Registry("callback")
Build = Callable[[Mapping[str, Any], "CallbackContext"], "Callback | None"]  # (options, context) -> callback


def callback(name: str) -> Callable[[Build], Build]:
    """Register a builder as `callbacks.<name>`; the keys it reads and their defaults, the only ones, are
    declared in zoo.training.callback_options (`build.options`): the builder gets every key
    (`build_callbacks` fills what was not given). A builder may return None where its callback has nothing
    to do."""

    def register(build: Build) -> Build:
        build.options = CALLBACK_OPTIONS[name]
        return CALLBACKS.register(name)(build)

    return register


@dataclass
class CallbackContext:
    """What callback factories may need besides their own options."""

    task: Task  # or its registered name
    checkpoint_dir: Path
    tokenizer: Any
    datamodule: Any
    progress_bar: bool = True  # trainer.enable_progress_bar

    def __post_init__(self) -> None:
        self.task = get_task(self.task)


class NonFiniteLossError(RuntimeError):
    """Raised before backward when the loss is NaN/inf; no checkpoint is written after it."""


class TokensPerSecond(Callback):
    """Logs `train/tokens_per_s` (all processes together) over the last `window` batches."""

    def __init__(self, window: Annotated[int, integer(1)] = 10) -> None:
        if window < 1:
            raise ValueError(f"callbacks.tokens_per_s.window must be >= 1, got {window}")
        self.window = window
        self._events: list[tuple[float, int]] = []

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        now = time.perf_counter()
        self._events.append((now, trained_tokens(pl_module, batch) * data_parallel_world(trainer)))
        self._events = self._events[-(self.window + 1):]
        # log on the steps whose values reach the loggers (the step has counted)
        n = trainer.log_every_n_steps
        if len(self._events) > 1 and n > 0 and trainer.global_step % n == 0:
            elapsed = now - self._events[0][0]
            tokens = sum(count for _, count in self._events[1:])
            pl_module.log("train/tokens_per_s", float(tokens) / max(elapsed, 1e-9), prog_bar=True)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._events = []  # validation time is not training throughput


class NonFiniteLossStop(Callback):
    """Stops at the first NaN/inf training loss (before backward) or validation loss (before that
    validation's checkpoints), with a message naming the step; `last.ckpt` on disk stays the last good one."""

    def __init__(self, checkpoint_dir: Path) -> None:
        self.checkpoint_dir = checkpoint_dir

    def _kept(self) -> str:
        last = self.checkpoint_dir / "last.ckpt"
        return f"the last good checkpoint is {last}" if last.exists() else "no checkpoint was written yet"

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           loss: torch.Tensor) -> None:
        if not bool(torch.isfinite(loss.detach())):
            raise NonFiniteLossError(
                f"non-finite training loss ({float(loss.detach())}) at step {trainer.global_step} "
                f"(batch {trainer.fit_loop.epoch_loop.batch_progress.current.ready}); training stopped, "
                f"{self._kept()}. "
                "Try a lower optim.lr, gradient clipping (trainer.gradient_clip_val) or 32-true precision."
            )

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loss = trainer.callback_metrics.get("val/loss")
        if loss is None or bool(torch.isfinite(loss)):
            return
        bad, counted = getattr(pl_module, "val_non_finite", (0, 0))
        raise NonFiniteLossError(
            f"non-finite validation loss (val/loss={float(loss)}) at step {trainer.global_step}: {bad} of "
            f"{counted} validation batches gave NaN/inf; training stopped, {self._kept()}. Try a lower "
            "optim.lr, gradient clipping (trainer.gradient_clip_val) or 32-true precision; "
            "callbacks.non_finite=null only warns."
        )


class ValExactMatch(Callback):
    """Output quality during training, for tasks with reference texts: the model's outputs for up to
    `max_examples` validation examples (`task.references`) against their references, scored by each of
    `task.reference_metrics` and logged as val/<name> (seq2seq: val/exact_match, val/bleu, val/chrf; every
    rank computes the same values)."""

    def __init__(self, task: Task, tokenizer, datamodule, max_examples: Annotated[int, integer(1)] = 200
                 ) -> None:
        self.task, self.tokenizer, self.datamodule, self.max_examples = (task, tokenizer, datamodule,
                                                                         max_examples)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        from zoo.training.sharding import gathered

        with gathered(pl_module.model):  # sharded: every rank decodes the same examples, greedily, in step
            hyps, refs = self.task.references(pl_module.model, self.tokenizer, self.datamodule,
                                              self.max_examples)
        for name, metric in self.task.reference_metrics.items():
            pl_module.log(f"val/{name}", metric(hyps, refs), prog_bar=name == "exact_match")


class SampleGeneration(Callback):
    """At the end of fit: print samples (and metrics such as test exact-match), log them, and keep them in
    `self.report` for the caller."""

    def __init__(self, task: Task, tokenizer, datamodule, options: Mapping[str, Any]) -> None:
        self.task, self.tokenizer, self.datamodule, self.options = task, tokenizer, datamodule, dict(options)
        self.report = None

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.interrupted or not trainer.is_global_zero or trainer.fast_dev_run:
            return
        from zoo.training.sharding import whole_model

        model = whole_model(trainer, pl_module)
        if model is None:
            print("samples skipped: the model is sharded and no last.ckpt was written (callbacks.checkpoint)")
            return
        report = make_samples(self.task, model, self.tokenizer, self.datamodule, self.options)
        self.report = report
        print(f"\n=== samples ({self.task.name}) ===")
        for s in report.samples:
            ref = f"\n   reference: {s.reference!r}" if s.reference else ""
            print(f"-> input:  {s.input!r}\n   output: {s.output!r}{ref}")
        for name, value in report.metrics.items():
            print(f"{name}: {value:.4f}")
        for logger in trainer.loggers:
            if report.metrics:
                logger.log_metrics(report.metrics, step=trainer.global_step)
            if hasattr(logger, "log_table") and report.samples:
                rows = [[s.input, s.output, s.reference] for s in report.samples]
                logger.log_table(key="samples", columns=["input", "output", "reference"], data=rows)


class RolloutTable(Callback):
    """task=grpo: every `every_n_steps` optimizer steps, the latest generation batch's first `num_shown`
    completions (the task's `rollout_samples`: prompt, completion, each reward) as a `rollouts` table on the
    loggers that take tables (W&B), as trl logs its completions."""

    def __init__(self, task: Task, every_n_steps: int, num_shown: int) -> None:
        self.task, self.every_n_steps, self.num_shown = task, every_n_steps, num_shown

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if trainer.global_step % self.every_n_steps or not trainer.is_global_zero:
            return
        table = pl_module.task.rollout_samples(self.num_shown)  # the task bound to this run's model
        for logger in trainer.loggers if table is not None else ():
            if hasattr(logger, "log_table"):
                logger.log_table(key="rollouts", columns=table[0], data=table[1], step=trainer.global_step)


class ZooCheckpoint(ModelCheckpoint):
    """`best.ckpt`: the best finite value of `monitor` (by default the lowest `val/loss`; any metric logged at
    validation with mode min or max, checked by zoo.training.monitor; a NaN/inf value never becomes best).
    `last.ckpt`: written at every validation, improved or not, and at the end of fit when steps ran after the
    last validation, so `ckpt_path=last` after a finished run trains nothing. (Lightning's own save_last
    follows a top-k save, i.e. it rewrites last.ckpt only when val/loss improves.)"""

    def check_monitor_top_k(self, trainer: L.Trainer, current: torch.Tensor | None = None) -> bool:
        if current is not None and not bool(torch.isfinite(current)):
            rank_zero_warn(f"{self.monitor}={float(current)} at step {trainer.global_step}: "
                           f"{self.filename}.ckpt is not updated (a non-finite validation is never the best)")
            return False
        return super().check_monitor_top_k(trainer, current)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """A resume whose recorded best.ckpt is gone (the run folder moved, the old temp folder deleted)
        forgets it, with a warning, instead of failing at the end when the test split loads it; the run's
        best starts afresh. A best.ckpt that still exists is kept, as Lightning keeps it."""
        super().load_state_dict(state_dict)
        if self.best_model_path and not Path(self.best_model_path).exists():
            rank_zero_warn(f"the resumed checkpoint's best ({self.best_model_path}) no longer exists; "
                           f"{self.filename}.ckpt starts afresh from this run's validations")
            self.best_model_path, self.best_model_score, self.best_k_models = "", None, {}
            self.kth_best_model_path = ""
            self.kth_value = torch.tensor(float("inf") if self.mode == "min" else -float("inf"))

    # The save helpers below are ModelCheckpoint's own (underscored, stable since Lightning 2.0); the
    # steps they leave on disk are pinned by tests/training/test_checkpoints.py.
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._should_skip_saving_checkpoint(trainer):
            candidates = self._monitor_candidates(trainer)
            self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._should_skip_saving_checkpoint(trainer):  # skipped when the final step was just saved
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save_last_checkpoint(self, trainer: L.Trainer, monitor_candidates: dict[str, torch.Tensor]) -> None:
        """last.ckpt; when this validation just wrote best.ckpt, that file shared by a hard link (Lightning's
        `save_last="link"` path, with `_link_checkpoint` below) instead of a second serialisation of the same
        step's state (issue 42: two full writes at every improving validation). Sharded checkpoints (folders
        written by every process) are saved again as before."""
        step = trainer.global_step
        written_now = bool(self._last_checkpoint_saved) and self._last_global_step_saved == step
        if self.save_last is not True or not written_now or not writes_one_file(trainer.strategy):
            super()._save_last_checkpoint(trainer, monitor_candidates)
            return
        self.save_last = "link"
        try:
            super()._save_last_checkpoint(trainer, monitor_candidates)
        finally:
            self.save_last = True

    @staticmethod
    def _link_checkpoint(trainer: L.Trainer, filepath: str, linkpath: str) -> None:
        """Rank 0 gives `linkpath` the finished checkpoint `filepath`'s bytes (zoo.atomic.atomic_same_file: a
        hard link, else a copy; renamed into place), where Lightning's own link is a symlink made after
        deleting the old file."""
        if trainer.is_global_zero and os.path.abspath(filepath) != os.path.abspath(linkpath):
            atomic_same_file(filepath, linkpath)
        trainer.strategy.barrier()


class StepProgressBar(RichProgressBar):
    """Rich bar titled by optimizer step (an LM "epoch" is just one evaluation interval) with short names."""

    SHORT = {"train/loss": "loss", "train/tokens_per_s": "tok/s", "val/loss": "val_loss",
             "val/exact_match": "exact_match"}

    def _get_train_description(self, current_epoch: int) -> str:
        return f"step {self.trainer.global_step}/{self.trainer.max_steps}"

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if self.progress is not None and self.train_progress_bar_id is not None:  # keep "step N" current
            self.progress.update(self.train_progress_bar_id, description=self._get_train_description(0))
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        return {self.SHORT.get(k, k): (round(v) if k == "train/tokens_per_s" else v)
                for k, v in items.items() if k != "v_num"}


# ------------------------------------------------------------------------------------- registry
# one builder per name declared in zoo.training.callback_options (checked at the end of this module)


@callback("progress_bar")
def _progress(opts: Mapping[str, Any], ctx: CallbackContext) -> Callback | None:
    """style auto: the rich bar in a terminal, progress lines (zoo.training.console) when stdout is not
    one."""
    if not ctx.progress_bar:
        return None
    opts = dict(opts)
    style, every = opts.pop("style"), opts.pop("every_n_steps")
    if style == "lines" or (style == "auto" and not sys.stdout.isatty()):
        return LineProgress(every_n_steps=every)
    return StepProgressBar(**opts)


@callback("checkpoint")
def _checkpoint(opts: Mapping[str, Any], ctx: CallbackContext) -> Callback:
    return ZooCheckpoint(dirpath=ctx.checkpoint_dir, filename="best", **opts, auto_insert_metric_name=False,
                         enable_version_counter=False)


callback("tokens_per_s")(lambda opts, ctx: TokensPerSecond(**opts))
callback("non_finite")(lambda opts, ctx: NonFiniteLossStop(ctx.checkpoint_dir))
callback("exact_match")(lambda opts, c: ValExactMatch(c.task, c.tokenizer, c.datamodule, **opts)
                        if c.task.has_references else None)  # none without references
callback("samples")(lambda opts, c: SampleGeneration(c.task, c.tokenizer, c.datamodule, opts))
callback("rollouts")(lambda opts, c: RolloutTable(c.task, **opts)
                     if callable(getattr(c.task, "rollout_samples", None)) else None)  # task=grpo only


@callback("test")
def _test(opts: Mapping[str, Any], ctx: CallbackContext) -> Callback:
    from zoo.training.final_evaluation import TestSplitEvaluation

    opts = dict(opts)
    return TestSplitEvaluation(ctx.task, ctx.tokenizer, ctx.datamodule, max_examples=opts.pop("max_examples"),
                               generation=opts)


@callback("attention_maps")
def _attention_maps(opts: Mapping[str, Any], ctx: CallbackContext) -> Callback:
    from zoo.inspection.callback import AttentionMapLogger  # owned by the inspection package

    return AttentionMapLogger(**opts)


def build_callbacks(cfg: Mapping[str, Any] | None, ctx: CallbackContext) -> list[Callback]:
    """`callbacks: {name: options}`; `null` or `enabled: false` switches one off; an option not given takes
    the default its callback declares."""
    made = [CALLBACKS.get(name)(opts, ctx) for name, opts in callback_settings(cfg).items()]
    return [callback for callback in made if callback is not None]


if sorted(CALLBACKS) != sorted(CALLBACK_OPTIONS):  # a declaration without a builder, or the reverse
    raise RuntimeError(f"callbacks declared {sorted(CALLBACK_OPTIONS)} but built {sorted(CALLBACKS)}")
