"""The training run behind `train.py`, callable without `@hydra.main`: `prepare(cfg)` validates everything
that can be checked before any data or model is built (raising ConfigError), `train(cfg)` builds data,
model, callbacks, logger and Trainer, fits, and returns metrics and checkpoint paths."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from zoo.checkpoint import CheckpointError, check_compatible, read_checkpoint
from zoo.config import ModelConfig
from zoo.data.sources.base import check_data_cfg
from zoo.options import ANY, Options, Rule, any_of, integer, list_of, one_of
from zoo.presets import config_root
from zoo.registry import unknown_choice_message
from zoo.training.optim import lr_multiplier
from zoo.training.options import check_config
from zoo.training.precision import resolve_accelerator, resolve_precision

# The task each architecture trains by default, and the architectures each task can train.
ARCH_TASKS = {"decoder": "lm", "encoder": "mlm", "encoder_decoder": "seq2seq"}
TASK_ARCHS = {"lm": ("decoder",), "mlm": ("encoder",), "seq2seq": ("encoder_decoder",), "classification": ("encoder",)}
# trainer.* keys that zoo resolves itself instead of handing them to lightning.Trainer unchanged.
TRAINER_PASSTHROUGH_EXCLUDED = {"logger", "callbacks", "plugins", "default_root_dir", "use_distributed_sampler"}
LABEL_SMOOTHING_TASKS = ("seq2seq",)


class ConfigError(ValueError):
    """Bad configuration found before training starts (one clear message, exit code 1)."""


@dataclass
class Plan:
    """Everything `prepare` decided: the run is fully determined by this and the data."""

    task: str
    model_cfg: dict[str, Any]
    data_cfg: dict[str, Any]
    tokenizer_cfg: dict[str, Any]
    trainer_kwargs: dict[str, Any]
    output_dir: Path
    ckpt_path: Path | None = None
    resolved: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrainResult:
    metrics: dict[str, float]
    output_dir: Path
    best_checkpoint: Path | None
    last_checkpoint: Path | None
    samples: Any = None


# ------------------------------------------------------------------------------------- decisions


def resolve_task(task: str, model_cfg: dict[str, Any]) -> str:
    """`auto` follows the architecture (an encoder with a classifier head trains classification)."""
    arch = model_cfg["arch"]
    if task == "auto":
        return "classification" if model_cfg.get("head") == "classifier" else ARCH_TASKS[arch]
    if task not in TASK_ARCHS:
        raise ConfigError("task: " + unknown_choice_message("task", task, ["auto", *TASK_ARCHS]))
    if arch not in TASK_ARCHS[task]:
        raise ConfigError(f"task={task} needs model.arch in {list(TASK_ARCHS[task])}, but model.arch={arch}")
    if task == "classification" and model_cfg.get("head") != "classifier":
        raise ConfigError("task=classification needs model.head=classifier (num_labels comes from the data)")
    if task != "classification" and model_cfg.get("head") == "classifier":
        raise ConfigError(f"task={task} needs model.head=lm, but model.head=classifier (that trains task=classification)")
    return task


def resolve_data(data_cfg: dict[str, Any], task: str, auto_data: dict[str, str]) -> dict[str, Any]:
    """`data=auto` (the default) becomes the built-in data for the task: conf/data/<auto_data[task]>.yaml,
    with any extra keys given on the command line (`+data.max_bytes=...`) laid on top."""
    if data_cfg.get("name") != "auto":
        return data_cfg
    if task not in auto_data:
        raise ConfigError(f"task={task} has no built-in data; name one, e.g. data=classification data.path=...")
    chosen = auto_data[task]
    path = config_root() / "data" / f"{chosen}.yaml"
    if not path.is_file():
        raise ConfigError(f"auto_data.{task}={chosen!r}: no such data config {path}")
    base = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    return {**base, **{k: v for k, v in data_cfg.items() if k != "name"}}


def world_size(trainer_cfg: dict[str, Any]) -> int:
    devices = trainer_cfg.get("devices", 1)
    per_node = devices if isinstance(devices, int) and devices > 0 else len(devices) if isinstance(devices, list) else 1
    return per_node * int(trainer_cfg.get("num_nodes", 1))


def trainer_options() -> Options:
    """trainer.*: lightning.Trainer's keyword parameters typed by its hints, stricter where zoo reads the
    value itself (devices, num_nodes, max_steps, accumulate_grad_batches), accelerator and strategy by
    Lightning's registries; precision is checked by resolve_precision (it also takes `auto`)."""
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    device_list = list_of(integer(0))
    return Options.of(L.Trainer.__init__, skip=TRAINER_PASSTHROUGH_EXCLUDED).extended({
        "accelerator": one_of("auto", "gpu", *sorted(AcceleratorRegistry.available_accelerators())),
        "strategy": one_of("auto", *StrategyRegistry.available_strategies()),
        "devices": any_of(integer(1), Rule(lambda v: bool(v) and device_list.test(v), "a non-empty list of "
                                           "device indices"), one_of("auto")),
        "num_nodes": integer(1),
        "max_steps": integer(1),
        "accumulate_grad_batches": integer(1),
        "precision": ANY,
    })


def trainer_kwargs(trainer_cfg: dict[str, Any]) -> dict[str, Any]:
    """Check trainer.* against lightning.Trainer's parameters and the hardware."""
    try:
        trainer_options().check("trainer", trainer_cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    kwargs = dict(trainer_cfg)
    accelerator = resolve_accelerator(str(kwargs.get("accelerator", "auto")))
    if accelerator == "gpu" and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.accelerator={kwargs.get('accelerator')} needs a CUDA GPU and none is visible; "
            "use trainer=cpu (or trainer=ddp_cpu for several CPU processes)"
        )
    devices = kwargs.get("devices", 1)
    if accelerator == "gpu" and isinstance(devices, int) and devices > torch.cuda.device_count():
        raise ConfigError(f"trainer.devices={devices} but only {torch.cuda.device_count()} GPU(s) are visible")
    try:
        kwargs["precision"] = resolve_precision(kwargs.get("precision", "auto"), accelerator)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if "max_steps" not in kwargs:
        raise ConfigError("trainer.max_steps is required: a positive integer (runs are counted in steps)")
    return kwargs


def find_last_checkpoint(runs_dir: Path, exclude: Path) -> Path:
    """`ckpt_path=last`: the newest `checkpoints/last.ckpt` of an earlier run under `runs_dir`."""
    found = [p for p in runs_dir.glob("**/checkpoints/last.ckpt") if exclude not in p.parents]
    if not found:
        raise ConfigError(f"ckpt_path=last: no earlier run with checkpoints/last.ckpt under {runs_dir}")
    return max(found, key=lambda p: p.stat().st_mtime)


def resolve_ckpt_path(value: str | None, runs_dir: Path, output_dir: Path) -> Path | None:
    if value in (None, ""):
        return None
    path = find_last_checkpoint(runs_dir, output_dir) if value == "last" else Path(value)
    try:
        read_checkpoint(path)
    except CheckpointError as e:
        raise ConfigError(f"ckpt_path={value}: {e}") from None
    return path


def validated_model(model: dict[str, Any]) -> dict[str, Any]:
    """ModelConfig.from_dict(model).to_dict(); a classifier may leave num_labels at 0: the data gives it."""
    from_data = model.get("head") == "classifier" and not model.get("num_labels")
    try:
        plain = ModelConfig.from_dict({**model, "num_labels": 1} if from_data else model).to_dict()
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None
    return {**plain, "num_labels": 0} if from_data else plain


def data_model_overrides(model_cfg: dict[str, Any], overrides: dict[str, int]) -> dict[str, int]:
    """The tokenizer/data fields for the model config; a num_labels the user set must match the data's."""
    given, found = model_cfg.get("num_labels"), overrides.get("num_labels")
    if given and found is not None and given != found:
        raise ConfigError(f"model.num_labels={given} but the data has {found} labels; "
                          "leave model.num_labels unset (the data sets it)")
    return overrides


def _plain(cfg: DictConfig) -> dict[str, Any]:
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception as e:  # interpolation errors name the key
        raise ConfigError(f"config does not resolve: {e}") from None


def checked(check: Callable[..., Any], *args: Any) -> Any:
    """Run one validation step; its ValueError becomes a ConfigError (one `error:` line from train.py)."""
    try:
        return check(*args)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def check_label_smoothing(value: float, task: str) -> None:
    """Label smoothing is implemented for the seq2seq loss only (ZooLightningModule)."""
    if value and task not in LABEL_SMOOTHING_TASKS:
        raise ConfigError(f"label_smoothing={value} applies to task={'|'.join(LABEL_SMOOTHING_TASKS)} only, "
                          f"not task={task}; leave label_smoothing=0.0")


def prepare(cfg: DictConfig) -> Plan:
    """Validate the composed config; raise ConfigError before anything is trained or written."""
    resolved = _plain(cfg)
    checked(check_config, resolved)  # every key known, every value allowed (groups that stand alone)
    model_cfg = validated_model(resolved["model"])
    task = resolve_task(resolved["task"], model_cfg)
    check_label_smoothing(resolved["label_smoothing"], task)
    data_cfg = resolve_data(resolved["data"], task, resolved["auto_data"])
    checked(check_data_cfg, data_cfg)
    kwargs = trainer_kwargs(resolved["trainer"])
    if task in ("lm", "mlm") and data_cfg.get("blocks_per_epoch") is None:
        # One LM "epoch" = one evaluation interval: validation and checkpoints land on epoch ends, so a
        # resumed run restarts exactly where the checkpoint was taken.
        accumulate = kwargs.get("accumulate_grad_batches", 1)
        data_cfg["blocks_per_epoch"] = resolved["eval_every"] * resolved["batch_size"] * accumulate * world_size(kwargs)
    kwargs.setdefault("val_check_interval", resolved["eval_every"] * kwargs.get("accumulate_grad_batches", 1))
    kwargs.setdefault("check_val_every_n_epoch", None)
    kwargs.setdefault("max_epochs", -1)
    checked(lr_multiplier, resolved["scheduler"], kwargs["max_steps"])
    output_dir = Path(resolved["paths"]["output_dir"])
    ckpt = resolve_ckpt_path(resolved.get("ckpt_path"), Path(resolved["paths"]["runs_dir"]), output_dir)
    if ckpt is not None:
        saved = read_checkpoint(ckpt)["zoo"]
        if saved["model_config"]["arch"] != model_cfg["arch"] or saved["task"] != task:
            raise ConfigError(
                f"ckpt_path={resolved['ckpt_path']}: checkpoint {ckpt} is a {saved['model_config']['arch']} "
                f"model trained on task {saved['task']}, this run is {model_cfg['arch']} / {task}"
            )
    return Plan(task, model_cfg, data_cfg, dict(resolved["tokenizer"]), kwargs, output_dir, ckpt, resolved)


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

    from zoo.data import build_data, model_overrides
    from zoo.presets import build
    from zoo.training.callbacks import CallbackContext, SampleGeneration, build_callbacks
    from zoo.training.checkpoint_io import AtomicCheckpointIO
    from zoo.training.distributed import shard_datamodule
    from zoo.training.loggers import build_logger, finish_logger
    from zoo.training.module import ZooLightningModule

    plan = prepare(cfg)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    try:
        tokenizer, datamodule = build_data(
            plan.data_cfg, plan.tokenizer_cfg, task=plan.task, max_seq_len=plan.model_cfg["max_seq_len"],
            batch_size=cfg.batch_size, cache_dir=cfg.paths.cache_dir, seed=cfg.seed,
        )
        model_config = ModelConfig.from_dict({**plan.model_cfg, **data_model_overrides(plan.model_cfg, model_overrides(tokenizer))})
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(str(e)) from None
    if plan.ckpt_path is not None:
        try:
            check_compatible(read_checkpoint(plan.ckpt_path), model_config, plan.task, plan.ckpt_path,
                             tokenizer=tokenizer)
        except CheckpointError as e:
            raise ConfigError(f"ckpt_path={cfg.ckpt_path}: {e}") from None

    model = build(model_config)
    module = ZooLightningModule(
        model, task=plan.task, tokenizer=tokenizer, optim=plan.resolved["optim"], scheduler=plan.resolved["scheduler"],
        label_smoothing=cfg.label_smoothing, compile_cfg=plan.resolved["compile"], seed=cfg.seed,
    )
    ckpt_dir = plan.output_dir / "checkpoints"
    ctx = CallbackContext(plan.task, ckpt_dir, tokenizer, datamodule,
                          progress_bar=plan.trainer_kwargs.get("enable_progress_bar", True))
    callbacks = build_callbacks(plan.resolved["callbacks"], ctx)
    logger = build_logger(plan.resolved["logger"], plan.output_dir, run_name(cfg))
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
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(plan.ckpt_path) if plan.ckpt_path else None)
        failed = False
    finally:
        if logger is not None:
            finish_logger(logger, failed=failed)
    sampler = next((c for c in callbacks if isinstance(c, SampleGeneration)), None)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    if sampler is not None and sampler.report is not None:
        metrics.update(sampler.report.metrics)
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    last = ckpt_dir / "last.ckpt"
    return TrainResult(metrics, plan.output_dir, Path(best) if best else None, last if last.exists() else None,
                       sampler.report if sampler else None)


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
    console.print(parameter_table(module.model, title=f"parameters ({plan.model_cfg['arch']}, task {plan.task})"))
    console.print(flops_table(module.model, plan.model_cfg["max_seq_len"]))
    plan.output_dir.mkdir(parents=True, exist_ok=True)
    module.tokenizer.save(plan.output_dir / "tokenizer")
    if logger is not None:
        hparams = {**plan.resolved, "resolved_task": plan.task, "resolved_data": plan.data_cfg,
                   "model_final": module.model.config.to_dict(), "parameters": module.model.num_parameters(),
                   "parameter_counts": parameter_counts(module.model),
                   "flops_per_token": _flops(flops_per_token(module.model, plan.model_cfg["max_seq_len"])),
                   "world_size": trainer.world_size, "pid": os.getpid()}
        logger.log_hyperparams(hparams)


def _flops(f) -> dict[str, int]:
    """FlopCount as plain numbers for the logger's config."""
    return {"seq_len": f.seq_len, "forward": f.forward, "training": f.training}
