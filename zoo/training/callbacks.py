"""Training callbacks, built by name from `conf/callbacks/*.yaml` through the CALLBACKS registry:
checkpoints (last = latest, best = best finite monitored metric), tokens/s, a non-finite-loss stop, validation
exact-match for tasks with reference texts, and generated samples at the end (printed and logged as a
table)."""

from __future__ import annotations

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

from zoo.generation.config import GENERATION_OPTIONS as DECODING
from zoo.options import BOOL, MAPPING, TEXT, Options, declared, integer, list_of, one_of, optional
from zoo.registry import Registry, unknown_choice_message
from zoo.tasks import Task, get_task
from zoo.tasks.samples import make_samples
from zoo.training.console import LineProgress, token_count
from zoo.training.distributed import data_parallel_world
from zoo.training.monitor import switched_on

CALLBACKS: Registry = Registry("callback")
ENABLED = {"enabled": BOOL}  # every callback may be switched off with enabled: false
Build = Callable[[Mapping[str, Any], "CallbackContext"], "Callback | None"]  # (options, context) -> callback


def callback(name: str, options: Options) -> Callable[[Build], Build]:
    """Register a builder as `callbacks.<name>` with the keys it reads (`options`: what
    `check_callbacks` allows, besides `enabled`) and their defaults, the only ones: the
    builder gets every key (`build_callbacks` fills what was not given), conf/callbacks YAML repeats no
    other value (tests/training/test_callbacks.py). A builder may return None where its callback has nothing
    to do."""

    def register(build: Build) -> Build:
        build.options = options
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
        self._events.append((now, token_count(batch) * data_parallel_world(trainer)))
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
# train.py's `callbacks: default` (conf/callbacks/default.yaml) switches every one on but attention_maps
# (opt-in: callbacks=with_attention_maps). The defaults below are the only ones.


@callback("progress_bar", declared(  # rich bar: step, loss, tok/s, val_loss
    refresh_rate=(integer(0), 5),  # redraw every 5 steps: each redraw costs a few % of a small CPU step
    leave=(BOOL, False),
    style=(one_of("auto", "bar", "lines"), "auto"),  # auto: the bar in a terminal, else lines (logs, CI)
    every_n_steps=(integer(1), 50)))  # lines: step, loss, tok/s, elapsed, ETA every n optimizer steps
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


# <run>/checkpoints/last.ckpt (each validation + end of fit), best.ckpt (best finite monitored value);
# monitor: any metric logged at validation, e.g. val/bleu with mode max (seq2seq)
@callback("checkpoint", declared(monitor=(TEXT, "val/loss"), mode=(one_of("min", "max"), "min"),
                                save_top_k=(integer(-1), 1), save_last=(BOOL, True)))
def _checkpoint(opts: Mapping[str, Any], ctx: CallbackContext) -> Callback:
    return ZooCheckpoint(dirpath=ctx.checkpoint_dir, filename="best", **opts, auto_insert_metric_name=False,
                         enable_version_counter=False)


callback("tokens_per_s", Options.of(TokensPerSecond.__init__))(lambda opts, ctx: TokensPerSecond(**opts))
callback("non_finite", Options({}))(lambda opts, ctx: NonFiniteLossStop(ctx.checkpoint_dir))
callback("exact_match", Options.of(ValExactMatch.__init__, skip=("task", "tokenizer", "datamodule")))(
    lambda opts, c: ValExactMatch(c.task, c.tokenizer, c.datamodule, **opts) if c.task.has_references
    else None)  # none without references
# at the end: print generated samples, log a table; the keys that decode have the library's rules
# (zoo.generation.config.GENERATION_OPTIONS) and these defaults
callback("samples", DECODING.only("max_new_tokens", "temperature", "top_k").defaulting(
    max_new_tokens=64, temperature=0.8, top_k=40).extended(declared(
        prompts=(list_of(TEXT), ["def ", "import os\n", "class "]),  # task=lm: continued, seeded per prompt
        seed=(integer(0), 0), num_shown=(integer(0), 5),
        max_examples=(integer(1), 500)))  # seq2seq: held-out test pairs translated for test/exact_match
)(lambda opts, c: SampleGeneration(c.task, c.tokenizer, c.datamodule, opts))


# at the end, when the data has a test split: test/<metric> of best.ckpt (docs/evaluation.md)
@callback("test", DECODING.only("num_beams", "length_penalty").extended(
    declared(max_examples=(optional(integer(1)), None))))  # null: the whole test split
def _test(opts: Mapping[str, Any], ctx: CallbackContext) -> Callback:
    from zoo.evaluation.callback import TestSplitEvaluation  # owned by the evaluation package

    opts = dict(opts)
    return TestSplitEvaluation(ctx.task, ctx.tokenizer, ctx.datamodule, max_examples=opts.pop("max_examples"),
                               generation=opts)


# the attention maps of one fixed validation example at every validation (PNGs in the run folder, W&B images)
@callback("attention_maps", declared(
    every_n_epochs=(integer(1), 1), max_tokens=(integer(1), 24), max_heads=(optional(integer(1)), 8),
    layers=(optional(list_of(integer(0))), None), model_attr=(TEXT, "model"),
    dirname=(TEXT, "attention_maps")))
def _attention_maps(opts: Mapping[str, Any], ctx: CallbackContext) -> Callback:
    from zoo.inspection.callback import AttentionMapLogger  # owned by the inspection package

    return AttentionMapLogger(**opts)


def check_callbacks(cfg: Mapping[str, Any] | None) -> None:
    """Every callback name registered, its options declared and allowed; `null` switches one off. One
    ValueError naming `callbacks.<name>.<key>`."""
    for name, opts in (cfg or {}).items():
        if name not in CALLBACKS:
            raise ValueError("callbacks: " + unknown_choice_message("callback", name, CALLBACKS.names()))
        if opts is not None:
            MAPPING.check(f"callbacks.{name}", opts)
            CALLBACKS.get(name).options.extended(ENABLED).check(f"callbacks.{name}", opts)


def callback_settings(cfg: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """`callbacks: {name: options}` -> each switched-on callback's options with its declared defaults
    filled in (`enabled` dropped): what its builder gets, from Hydra or from a library user alike (checked
    first, so a library user without Hydra gets the same errors as train.py)."""
    check_callbacks(cfg)
    return {name: CALLBACKS.get(name).options.filled({k: v for k, v in (opts or {}).items()
                                                      if k != "enabled"})
            for name, opts in (cfg or {}).items() if switched_on(cfg, name)}


def build_callbacks(cfg: Mapping[str, Any] | None, ctx: CallbackContext) -> list[Callback]:
    """`callbacks: {name: options}`; `null` or `enabled: false` switches one off; an option not given takes
    the default its callback declares."""
    made = [CALLBACKS.get(name)(opts, ctx) for name, opts in callback_settings(cfg).items()]
    return [callback for callback in made if callback is not None]


def register_callback_configs() -> None:
    """The declared defaults as Hydra config nodes, which conf/callbacks/*.yaml compose from (so that
    `callbacks.checkpoint.mode=max` overrides a key that exists): `callbacks/_declared` holds every
    registered callback with its defaults, `callbacks/_declared/<name>` one of them (a YAML switching an
    opt-in one on: `- _declared/attention_maps@attention_maps`)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    declared_now = {name: dict(CALLBACKS.get(name).options.defaults) for name in CALLBACKS}
    store.store(group="callbacks", name="_declared", node=declared_now)
    for name, defaults in declared_now.items():
        store.store(group="callbacks/_declared", name=name, node=defaults)
