"""The training run behind `train.py`, callable without `@hydra.main`, in three steps: `prepare(cfg)` plans
(zoo/training/plan.py: config checks, ConfigError before any file is read), `open_run(plan)` reads what the
plan names, each once (the checkpoint to resume, the init_from weights, tokenizer and data) and builds the
model, and `fit(opened)` trains it and returns metrics and checkpoint paths."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import lightning as L
from omegaconf import DictConfig

from zoo.apps import ConfigError, bad_input
from zoo.checkpoint import Checkpoint, check_compatible
from zoo.training.plan import Plan, prepare
from zoo.training.resume import an, check_same_epochs, check_unfinished, last_of_this_model, model_and_task


@dataclass
class TrainResult:
    metrics: dict[str, float]
    output_dir: Path
    best_checkpoint: Path | None
    last_checkpoint: Path | None
    samples: Any = None
    wandb_run: str | None = None  # the W&B run's URL (online) or folder (offline), for the closing summary
    generate_with: str | None = None  # generate.py's input key for this model (prompt | src); None: it cannot
    finished_at: int | None = None  # its last step when that is trainer.max_steps (a resume needs more)


@dataclass
class Opened:
    """What `open_run` read and built, each once, for `fit`: the resumed checkpoint goes on to Lightning's
    resume as read (zoo.training.checkpoint_io), its record to the W&B logger."""

    plan: Plan
    tokenizer: Any
    datamodule: Any
    model: Any
    applied: Any  # zoo.finetune.methods.Applied: what the finetune method did, for the log
    resumed: Checkpoint | None = None


def train(cfg: DictConfig) -> TrainResult:
    """Train as configured. Raises ConfigError for bad input (before training), NonFiniteLossError if the
    loss diverges; the logger is finished in every case."""
    plan = prepare(cfg)  # config only: nothing read yet
    L.seed_everything(plan.resolved["seed"], workers=True, verbose=False)
    return fit(open_run(plan))


# ------------------------------------------------------------------------------------------- open


def read_resumed(path: Path, given: str) -> Checkpoint:
    """The checkpoint `ckpt_path=given` names, read (and checked against its own config) once; a sharded
    one without its tensors: the sharded strategy reads each rank's part itself (zoo.training.sharding)."""
    with bad_input(f"ckpt_path={given}: "):
        return Checkpoint.read(path, shards=False)


def check_resumable(ckpt: Checkpoint, given: str, plan: Plan) -> None:
    """The checkpoint holds the same architecture trained on the same task, in the tensor layout of this
    run's strategy (the rest is compared once the data has completed the model config)."""
    from zoo.training.strategies import check_resumed_layout

    saved_arch, saved_task = model_and_task(ckpt)
    if (saved_arch, saved_task) != (plan.model.arch, plan.task.name):
        raise ConfigError(f"ckpt_path={given}: checkpoint {ckpt.path} is {an(str(saved_arch))} model "
                          f"trained on task {saved_task}, this run is {plan.model.arch} / {plan.task.name}")
    with bad_input(f"ckpt_path={given}: "):
        check_resumed_layout(ckpt.record.layout, plan.trainer_kwargs, ckpt.path)  # TP holds q/k/v unfused


def open_run(plan: Plan) -> Opened:
    """Read what `plan` names, cheapest failure first (the checkpoint, the init_from weights, then tokenizer
    and data), and build the model to train; ConfigError for anything that does not fit: each check raises
    ValueError, and the one handler here (`zoo.apps.bad_input`) makes it the ConfigError, a check of the
    resumed checkpoint's with `ckpt_path=...: ` before it."""
    with bad_input():
        return _open(plan)


def _open(plan: Plan) -> Opened:
    """`open_run`'s steps in order; a check's ValueError goes up to its handler."""
    from zoo.finetune.resume import check_resumed_training
    from zoo.finetune.setup import align_labels, build_model, final_config, read_init
    from zoo.tasks import build_data

    resolved, resumed = plan.resolved, None
    given = resolved["ckpt_path"]
    if plan.ckpt_path is not None:
        with bad_input(f"ckpt_path={given}: "):
            resumed = read_resumed(plan.ckpt_path, given)
            if given == "last":  # the newest run of this architecture and task, not of any model
                resumed = last_of_this_model(resumed, (plan.model.arch, plan.task.name),
                                             Path(resolved["paths"]["runs_dir"]), plan.output_dir,
                                             lambda path: read_resumed(path, given))
            check_resumable(resumed, given, plan)
            check_unfinished(resumed, plan.trainer_kwargs["max_steps"])
            plan.task.check_resumed(resumed.data, resolved.get(plan.task.settings_group or "", {}))
    init = read_init(plan.init, plan.output_dir, resolved.get("finetune")) if plan.init is not None else None
    try:
        tokenizer, datamodule = build_data(
            plan.data_cfg, (init and init.tokenizer_cfg) or plan.tokenizer_cfg, task=plan.task,
            max_seq_len=plan.model.max_seq_len, batch_size=resolved["batch_size"],
            cache_dir=resolved["paths"]["cache_dir"], seed=resolved["seed"],
            tokenizer=init and init.tokenizer,
        )
        align_labels(plan.init, tokenizer, datamodule)  # a reused head's labels keep the folder's order
        model_config = plan.task.model_config(plan.model, tokenizer)  # + vocabulary, special ids, num_labels
        model_config = final_config(plan.init, model_config, tokenizer)  # init_from keeps its vocabulary
    except FileNotFoundError as e:  # a data or tokenizer file named in the config (a ValueError goes up)
        raise ConfigError(str(e)) from None
    if resumed is not None:
        with bad_input(f"ckpt_path={given}: "):
            check_compatible(resumed.record, model_config, plan.task.name, resumed.path, tokenizer)
            check_same_epochs(resumed, type(datamodule).__qualname__,  # Lightning's key of its state
                              datamodule.state_dict().get("blocks_per_epoch"), resolved,
                              plan.trainer_kwargs.get("accumulate_grad_batches", 1))
    finetune_cfg = resolved.get("finetune") or {"name": "full"}
    model, applied = build_model(plan.init, init and init.state, model_config, finetune_cfg)
    if resumed is not None:
        check_resumed_training(model, resumed.record, resolved["ckpt_path"], str(resumed.path))
    return Opened(plan, tokenizer, datamodule, model, applied, resumed)


# -------------------------------------------------------------------------------------------- fit


def fit(opened: Opened) -> TrainResult:
    """Train the opened model with Lightning: callbacks, logger and Trainer as planned; a resume continues
    from the checkpoint already read."""
    from lightning.pytorch.callbacks import Checkpoint as CheckpointCallback

    from zoo.finetune.setup import announce
    from zoo.training.callbacks import CallbackContext, build_callbacks
    from zoo.training.checkpoint_io import AtomicCheckpointIO, hand_over
    from zoo.training.distributed import shard_datamodule
    from zoo.training.loggers import build_logger, finish_logger
    from zoo.training.module import ZooLightningModule
    from zoo.training.strategies import trainer_arguments

    plan, resolved = opened.plan, opened.plan.resolved
    resumed, opened.resumed = opened.resumed, None  # held below until Lightning's resume takes it
    resume_from = str(resumed.path) if resumed else None
    module = ZooLightningModule(
        opened.model, task=plan.task, tokenizer=opened.tokenizer, optim=resolved["optim"],
        scheduler=resolved["scheduler"], label_smoothing=resolved["label_smoothing"],
        compile_cfg=resolved["compile"], seed=resolved["seed"], memory=resolved.get("memory"),
        task_settings=resolved.get(plan.task.settings_group or "", {}),
    )
    ctx = CallbackContext(module.task, plan.output_dir / "checkpoints", opened.tokenizer, opened.datamodule,
                          progress_bar=plan.trainer_kwargs.get("enable_progress_bar", True))
    callbacks = build_callbacks(resolved["callbacks"], ctx)
    logger = build_logger(resolved["logger"], plan.output_dir, run_name(plan),
                          resume_id=resumed.record.wandb_run_id if resumed else None)
    trainer = L.Trainer(
        **trainer_arguments(plan.trainer_kwargs),
        logger=logger if logger is not None else False, callbacks=callbacks,
        plugins=[AtomicCheckpointIO()], default_root_dir=str(plan.output_dir),
        enable_checkpointing=any(isinstance(c, CheckpointCallback) for c in callbacks),
        use_distributed_sampler=False,  # zoo shards the data itself (same global batch as one process)
    )
    hand_over(trainer, resumed)  # Lightning's resume gets the checkpoint as read (and lets it go)
    del resumed
    shard_datamodule(opened.datamodule, trainer)
    if trainer.is_global_zero:
        _remove_leftovers(Path(resolved["paths"]["runs_dir"]), plan.output_dir)
    failed = True
    try:
        if trainer.is_global_zero:
            _announce(trainer, module, plan, logger)
            announce(module.model, opened.applied, plan.init)
        trainer.fit(module, datamodule=opened.datamodule, ckpt_path=resume_from)
        failed = False
    finally:
        if logger is not None:
            finish_logger(logger, failed=failed)
    return _result(trainer, callbacks, plan.output_dir, module.model, logger)


def run_name(plan: Plan) -> str:
    try:
        from hydra.core.hydra_config import HydraConfig

        choice = HydraConfig.get().runtime.choices.get("model")
    except ValueError:  # composed without @hydra.main (tests)
        choice = plan.resolved["model"]["arch"]
    return f"{choice}-{datetime.now():%Y%m%d-%H%M%S}"


def _result(trainer: L.Trainer, callbacks: list, output_dir: Path, model, logger) -> TrainResult:
    """Metrics (validation, sample quality, the test split) and checkpoint paths of a finished fit."""
    from zoo.training.callbacks import SampleGeneration
    from zoo.training.console import wandb_location
    from zoo.training.final_evaluation import TestSplitEvaluation

    sampler = next((c for c in callbacks if isinstance(c, SampleGeneration)), None)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    if sampler is not None and sampler.report is not None:
        metrics.update(sampler.report.metrics)
    tester = next((c for c in callbacks if isinstance(c, TestSplitEvaluation)), None)
    if tester is not None:
        metrics.update(tester.metrics)  # test/<metric>: the test split, when the data has one
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    last = output_dir / "checkpoints" / "last.ckpt"
    finished = trainer.global_step if 0 < trainer.max_steps <= trainer.global_step else None
    return TrainResult(metrics, output_dir, Path(best) if best else None, last if last.exists() else None,
                       sampler.report if sampler else None, wandb_location(logger), _generate_key(model),
                       finished)


def _generate_key(model) -> str | None:
    """generate.py's input for this model: `src` (encoder-decoder), `prompt` (decoder), None (encoder)."""
    return "src" if model.is_encoder_decoder else "prompt" if model.self_stream == "decoder" else None


def _remove_leftovers(runs_dir: Path, output_dir: Path) -> None:
    """Delete (and name) the temp files that killed checkpoint saves of this run family left behind."""
    from zoo.training.checkpoint_io import remove_stale_checkpoint_temps

    removed = remove_stale_checkpoint_temps(runs_dir, output_dir)
    if removed:
        print(f"removed {len(removed)} temp file(s) of interrupted checkpoint saves, e.g. {removed[0]}")


def _announce(trainer: L.Trainer, module, plan: Plan, logger) -> None:
    """Print the model's parameter / FLOP tables, save the tokenizer and log the resolved config."""
    from rich.console import Console

    from zoo.inspection import flops_per_token, flops_table, parameter_counts, parameter_table

    console = Console()
    title = f"parameters ({plan.model.arch}, task {plan.task.name})"
    console.print(parameter_table(module.model, title=title))
    console.print(flops_table(module.model, plan.model.max_seq_len))
    plan.output_dir.mkdir(parents=True, exist_ok=True)
    module.tokenizer.save(plan.output_dir / "tokenizer")
    if logger is not None:
        flops = flops_per_token(module.model, plan.model.max_seq_len)
        hparams = {**plan.resolved, "resolved_task": plan.task.name, "resolved_data": plan.data_cfg,
                   "model_final": module.model.config.to_dict(), "parameters": module.model.num_parameters(),
                   "parameter_counts": parameter_counts(module.model),
                   "flops_per_token": {k: getattr(flops, k) for k in ("seq_len", "forward", "training")},
                   "world_size": trainer.world_size, "pid": os.getpid()}
        logger.log_hyperparams(hparams)
