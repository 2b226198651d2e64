"""The training run behind `train.py`, callable without `@hydra.main`: `train(cfg)` takes the Plan that
`prepare(cfg)` resolved (zoo/training/plan.py: ConfigError before any data or model is built), builds data,
model, callbacks, logger and Trainer, fits, and returns metrics and checkpoint paths."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import lightning as L
from omegaconf import DictConfig

from zoo.checkpoint import CheckpointError, check_compatible, read_checkpoint
from zoo.training.plan import ConfigError, Plan, prepare, resolve_ckpt_path, trainer_kwargs

# prepare, ConfigError, ... are re-exported: `from zoo.training.run import prepare` predates plan.py
__all__ = ["ConfigError", "Plan", "TrainResult", "prepare", "resolve_ckpt_path", "train", "trainer_kwargs"]


@dataclass
class TrainResult:
    metrics: dict[str, float]
    output_dir: Path
    best_checkpoint: Path | None
    last_checkpoint: Path | None
    samples: Any = None
    wandb_run: str | None = None  # the W&B run's URL (online) or folder (offline), for the closing summary
    generate_with: str | None = None  # generate.py's input key for this model (prompt | src); None: it cannot


def run_name(cfg: DictConfig) -> str:
    try:
        from hydra.core.hydra_config import HydraConfig

        choice = HydraConfig.get().runtime.choices.get("model")
    except ValueError:  # composed without @hydra.main (tests)
        choice = cfg.model.arch
    return f"{choice}-{datetime.now():%Y%m%d-%H%M%S}"


# -------------------------------------------------------------------------------------------- run


def train(cfg: DictConfig) -> TrainResult:
    """Train as configured. Raises ConfigError for bad input (before training), NonFiniteLossError if the
    loss diverges; the logger is finished in every case."""
    from lightning.pytorch.callbacks import Checkpoint

    from zoo.evaluation.callback import TestSplitEvaluation
    from zoo.finetune.setup import (
        align_labels,
        announce,
        build_model,
        check_resumed_training,
        final_config,
        read_init,
    )
    from zoo.tasks import build_data
    from zoo.training.callbacks import CallbackContext, SampleGeneration, build_callbacks
    from zoo.training.checkpoint_io import AtomicCheckpointIO
    from zoo.training.console import wandb_location
    from zoo.training.distributed import shard_datamodule
    from zoo.training.loggers import build_logger, finish_logger
    from zoo.training.module import ZooLightningModule

    plan = prepare(cfg)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    finetune_cfg = plan.resolved.get("finetune") or {"name": "full"}
    init = None
    if plan.init is not None:  # pretrained weights read before any data: a corrupt file stops the run here
        try:
            init = read_init(plan.init, plan.output_dir)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    try:
        tokenizer, datamodule = build_data(
            plan.data_cfg, (init and init.tokenizer_cfg) or plan.tokenizer_cfg, task=plan.task,
            max_seq_len=plan.model.max_seq_len,
            batch_size=cfg.batch_size, cache_dir=cfg.paths.cache_dir, seed=cfg.seed,
        )
        align_labels(plan.init, tokenizer, datamodule)  # a reused head's labels keep the folder's order
        model_config = plan.task.model_config(plan.model, tokenizer)  # + vocabulary, special ids, num_labels
        model_config = final_config(plan.init, model_config, tokenizer)  # init_from keeps its vocabulary
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(str(e)) from None
    if plan.ckpt_path is not None:
        try:
            check_compatible(read_checkpoint(plan.ckpt_path), model_config, plan.task.name, plan.ckpt_path,
                             tokenizer=tokenizer)
        except CheckpointError as e:
            raise ConfigError(f"ckpt_path={cfg.ckpt_path}: {e}") from None

    try:
        model, applied = build_model(plan.init, init and init.state, model_config, finetune_cfg)
        if plan.ckpt_path is not None:
            check_resumed_training(model, read_checkpoint(plan.ckpt_path), cfg.ckpt_path, str(plan.ckpt_path))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    module = ZooLightningModule(
        model, task=plan.task, tokenizer=tokenizer, optim=plan.resolved["optim"], scheduler=plan.resolved["scheduler"],
        label_smoothing=cfg.label_smoothing, compile_cfg=plan.resolved["compile"], seed=cfg.seed,
        memory=plan.resolved.get("memory"),
    )
    ckpt_dir = plan.output_dir / "checkpoints"
    ctx = CallbackContext(plan.task, ckpt_dir, tokenizer, datamodule,
                          progress_bar=plan.trainer_kwargs.get("enable_progress_bar", True))
    callbacks = build_callbacks(plan.resolved["callbacks"], ctx)
    resume_id = read_checkpoint(plan.ckpt_path)["zoo"].get("wandb_run_id") if plan.ckpt_path else None
    logger = build_logger(plan.resolved["logger"], plan.output_dir, run_name(cfg), resume_id=resume_id)
    trainer = L.Trainer(
        **plan.trainer_kwargs, logger=logger if logger is not None else False, callbacks=callbacks,
        plugins=[AtomicCheckpointIO()], default_root_dir=str(plan.output_dir),
        enable_checkpointing=any(isinstance(c, Checkpoint) for c in callbacks),
        use_distributed_sampler=False,  # zoo shards the data itself (same global batch as one process)
    )
    shard_datamodule(datamodule, trainer)
    if trainer.is_global_zero:
        _remove_leftovers(Path(plan.resolved["paths"]["runs_dir"]), plan.output_dir)
    failed = True
    try:
        if trainer.is_global_zero:
            _announce(trainer, module, plan, logger)
            announce(module.model, applied, plan.init)
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(plan.ckpt_path) if plan.ckpt_path else None)
        failed = False
    finally:
        if logger is not None:
            finish_logger(logger, failed=failed)
    sampler = next((c for c in callbacks if isinstance(c, SampleGeneration)), None)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    if sampler is not None and sampler.report is not None:
        metrics.update(sampler.report.metrics)
    tester = next((c for c in callbacks if isinstance(c, TestSplitEvaluation)), None)
    if tester is not None:
        metrics.update(tester.metrics)  # test/<metric>: the test split, when the data has one
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    last = ckpt_dir / "last.ckpt"
    return TrainResult(metrics, plan.output_dir, Path(best) if best else None, last if last.exists() else None,
                       sampler.report if sampler else None, wandb_location(logger), _generate_key(module.model))


def _generate_key(model) -> str | None:
    """generate.py's input for this model: `src` (encoder-decoder), `prompt` (decoder), None (encoder only)."""
    if model.is_encoder_decoder:
        return "src"
    return "prompt" if getattr(model, "self_stream", None) == "decoder" else None


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
    console.print(parameter_table(module.model, title=f"parameters ({plan.model.arch}, task {plan.task.name})"))
    console.print(flops_table(module.model, plan.model.max_seq_len))
    plan.output_dir.mkdir(parents=True, exist_ok=True)
    module.tokenizer.save(plan.output_dir / "tokenizer")
    if logger is not None:
        hparams = {**plan.resolved, "resolved_task": plan.task.name, "resolved_data": plan.data_cfg,
                   "model_final": module.model.config.to_dict(), "parameters": module.model.num_parameters(),
                   "parameter_counts": parameter_counts(module.model),
                   "flops_per_token": _flops(flops_per_token(module.model, plan.model.max_seq_len)),
                   "world_size": trainer.world_size, "pid": os.getpid()}
        logger.log_hyperparams(hparams)


def _flops(f) -> dict[str, int]:
    """FlopCount as plain numbers for the logger's config."""
    return {"seq_len": f.seq_len, "forward": f.forward, "training": f.training}
