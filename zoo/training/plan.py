"""The first step of a training run (plan -> open -> fit): `prepare(cfg)` turns the composed Hydra config
into a Plan (the task object, the model config, the data, tokenizer and trainer settings, the checkpoint to
resume) and checks everything that can be checked before any file is read, raising ConfigError. It reads no
data and no checkpoint (only that one exists); with init_from the source's config, which decides the model,
is read once and kept in the plan."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig

from zoo.apps import ConfigError, bad_input, plain, resolve_data
from zoo.checkpoint import checkpoint_file
from zoo.config import ModelConfig
from zoo.data.datamodules import DEFAULT_SHARDS
from zoo.data.sources.base import check_data_cfg
from zoo.finetune.methods import check_strategy_for
from zoo.finetune.setup import InitPlan, check_finetune_cfg, plan_init
from zoo.models.size import check_fits
from zoo.options import ANY, BOOL, Options, Rule, any_of, integer, list_of, one_of
from zoo.registry import unknown_choice_message
from zoo.tasks import TASKS, Task, check_task_settings, default_task
from zoo.tasks.base import labels_to_come
from zoo.training.distributed import check_parts
from zoo.training.monitor import check_monitor
from zoo.training.optim import check_optim_with_trainer, check_optimizer_model, lr_multiplier
from zoo.training.options import check_config
from zoo.training.precision import resolve_accelerator, resolve_precision
from zoo.training.resume import earlier_checkpoints
from zoo.training.strategies import STRATEGIES, check_resume, check_strategy, data_parallel_size

# trainer.* keys that zoo resolves itself instead of handing them to lightning.Trainer unchanged.
TRAINER_PASSTHROUGH_EXCLUDED = {"logger", "callbacks", "plugins", "default_root_dir",
                                "use_distributed_sampler"}


@dataclass
class Plan:
    """Everything `prepare` decided: the run is fully determined by this and the data. Fields the data
    decides (vocabulary, special ids, a classifier's num_labels) are filled in by `task.model_config`."""

    task: Task
    model: ModelConfig
    data_cfg: dict[str, Any]
    tokenizer_cfg: dict[str, Any]
    trainer_kwargs: dict[str, Any]
    output_dir: Path
    ckpt_path: Path | None
    resolved: dict[str, Any]
    init: InitPlan | None  # init_from's source and what it decided


# ------------------------------------------------------------------------------------ model, task, data


def resolve_model(model: dict[str, Any]) -> ModelConfig:
    """The model group as a ModelConfig (checked with the task, `zoo.models.check_config`). Each part came
    whole from the preset or the command line (zoo.hydra_schema.part_overrides), so a key of an entry not
    chosen is refused by the part's parse, naming the entry that reads it."""
    try:
        return ModelConfig.from_dict(model)
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None


def resolve_task(name: str, model: ModelConfig) -> Task:
    """`auto` asks every task whether it trains `model` by default (decoder -> lm, encoder -> mlm, encoder
    with a classifier head -> classification, encoder_decoder -> seq2seq); the task then checks the model."""
    if name == "auto":
        task = default_task(model)
    elif name in TASKS:
        task = TASKS.get(name)
    else:
        raise ConfigError("task: " + unknown_choice_message("task", name, ["auto", *TASKS.names()]))
    task.check_model(model)
    return task


def check_memory(memory: dict[str, Any], task: Task) -> None:
    """memory.loss_chunk_size needs a task whose loss can be computed from hidden states chunk by chunk."""
    if memory.get("loss_chunk_size") and not task.chunked_loss:
        able = "|".join(name for name in TASKS.names() if TASKS.get(name).chunked_loss)
        raise ValueError(f"memory.loss_chunk_size={memory['loss_chunk_size']} applies to task={able}, not "
                         f"task={task.name}; leave it null")


# ------------------------------------------------------------------------------------------- trainer


def world_size(trainer_cfg: dict[str, Any]) -> int:
    """Processes of the run: devices per node (a count, a list of indices; `auto` counts 1) x nodes."""
    devices = trainer_cfg.get("devices", 1)
    per_node = len(devices) if isinstance(devices, list) else devices if isinstance(devices, int) else 1
    return max(per_node, 1) * int(trainer_cfg.get("num_nodes", 1))


def trainer_options() -> Options:
    """trainer.*: lightning.Trainer's keyword parameters typed by its hints, stricter where zoo reads the
    value itself (devices, num_nodes, max_steps, accumulate_grad_batches), accelerator and strategy by
    Lightning's registries; precision is checked by resolve_precision (it also takes `auto`)."""
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    device_list = list_of(integer(0))
    return Options.of(L.Trainer.__init__, skip=TRAINER_PASSTHROUGH_EXCLUDED).extended({
        "accelerator": one_of("auto", "gpu", *sorted(AcceleratorRegistry.available_accelerators())),
        "strategy": one_of("auto", *StrategyRegistry.available_strategies(), *STRATEGIES),
        "devices": any_of(integer(1), Rule(lambda v: bool(v) and device_list.test(v), "a non-empty list of "
                                           "device indices"), one_of("auto")),
        "num_nodes": integer(1),
        "max_steps": integer(1),
        "accumulate_grad_batches": integer(1),
        "precision": ANY,
        "sharded_checkpoint": BOOL,  # zoo's: trainer.strategy=fsdp writes torch.distributed.checkpoint shards
        "tp_size": integer(1),  # zoo's: trainer.strategy=fsdp_tp splits each block over this many processes
    })


def trainer_kwargs(trainer_cfg: dict[str, Any]) -> dict[str, Any]:
    """Check trainer.* against lightning.Trainer's parameters and the hardware."""
    trainer_options().check("trainer", trainer_cfg)
    kwargs = dict(trainer_cfg)
    accelerator = resolve_accelerator(str(kwargs.get("accelerator", "auto")))
    if accelerator == "gpu" and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.accelerator={kwargs.get('accelerator')} needs a CUDA GPU and none is visible; "
            "use trainer=cpu (or trainer=ddp_cpu for several CPU processes)"
        )
    devices = kwargs.get("devices", 1)
    if accelerator == "gpu" and isinstance(devices, int) and devices > torch.cuda.device_count():
        raise ConfigError(f"trainer.devices={devices} but only {torch.cuda.device_count()} GPU(s) are "
                          "visible")
    kwargs["precision"] = resolve_precision(kwargs.get("precision", "auto"), accelerator)
    if "max_steps" not in kwargs:
        raise ConfigError("trainer.max_steps is required: a positive integer (runs are counted in steps)")
    return kwargs


# ---------------------------------------------------------------------------------------- checkpoint


def resolve_ckpt_path(value: str | None, runs_dir: Path, output_dir: Path) -> Path | None:
    """The checkpoint `ckpt_path=value` names (`last`: the newest `checkpoints/last.ckpt` of an earlier run
    under `runs_dir`; open_run takes an older one when that run's model is another,
    `zoo.training.resume.last_of_this_model`); that it exists is all that is checked here: the run's open
    step reads it, once."""
    if value in (None, ""):
        return None
    path = Path(value)
    if value == "last":  # the newest here; open_run goes on to older ones if its model is another
        found = earlier_checkpoints(runs_dir, output_dir)
        if not found:
            raise ConfigError(f"ckpt_path=last: no earlier run with checkpoints/last.ckpt under {runs_dir}")
        path = found[0]
    with bad_input(f"ckpt_path={value}: "):
        return checkpoint_file(path)


# ------------------------------------------------------------------------------------------- prepare


def prepare(cfg: DictConfig) -> Plan:
    """Validate the composed config; raise ConfigError before anything is read, trained or written: each
    check raises ValueError, and the one handler here (`zoo.apps.bad_input`) makes it the ConfigError."""
    resolved = plain(cfg)
    with bad_input():
        check_config(resolved)  # every key known, every value allowed (groups that stand alone)
        named_task = TASKS.get(resolved["task"]) if resolved["task"] in TASKS else None
        init = plan_init(resolved, named_task.head if named_task else None)  # init_from: its config
        model = init.model if init is not None else resolve_model(resolved["model"])
        task = resolve_task(resolved["task"], model)
        check_fits(model)  # before the meta build below, which no memory bounds
        # the data sets a classifier's num_labels; 1 stands in for it while the finetune names are checked
        meta = check_finetune_cfg(resolved.get("finetune") or {"name": "full"},
                                  labels_to_come(model), init)
        check_optimizer_model(meta, resolved["optim"])  # muon needs hidden matrices that train
        task.check_label_smoothing(resolved["label_smoothing"])
        check_task_settings(resolved, task)  # dpo.*: checked by task=dpo, refused for other tasks
        check_memory(resolved.get("memory") or {}, task)
        check_monitor(resolved.get("callbacks"), task)
        data_cfg = resolve_data(resolved["data"], task)
        check_data_cfg(data_cfg)
        task.check_chosen(resolved.get(task.settings_group or "") or {})  # grpo: a reward to train on
        kwargs = trainer_kwargs(resolved["trainer"])
        check_optim_with_trainer(resolved["optim"], kwargs)
        world = world_size(kwargs)
        strategy = str(resolved["trainer"].get("strategy"))
        if strategy in task.refused_strategies:
            raise ValueError(f"task={task.name} cannot train under trainer.strategy={strategy}: "
                             f"{task.refused_strategies[strategy]}")
        check_strategy_for(resolved.get("finetune") or {"name": "full"}, strategy)  # qlora: not fsdp_tp
        check_strategy(resolved, model, world)  # trainer.strategy=fsdp(_tp): options it cannot shard
        world = data_parallel_size(kwargs, world)  # processes reading different batches
        if task.corpus_kind == "text":  # LM/MLM token streams: data.shards parts, shared by the ranks
            check_parts(data_cfg.get("shards") or DEFAULT_SHARDS, world)
        accumulate = kwargs.get("accumulate_grad_batches", 1)
        per_eval = resolved["eval_every"] * resolved["batch_size"] * accumulate * world
        data_cfg = task.with_epoch(data_cfg, per_eval)  # examples (all processes) between two validations
        kwargs.setdefault("val_check_interval", resolved["eval_every"] * accumulate)
        kwargs.setdefault("check_val_every_n_epoch", None)
        kwargs.setdefault("max_epochs", -1)
        lr_multiplier(resolved["scheduler"], kwargs["max_steps"])
        output_dir = Path(resolved["paths"]["output_dir"])
        ckpt = resolve_ckpt_path(resolved.get("ckpt_path"), Path(resolved["paths"]["runs_dir"]), output_dir)
        with bad_input(f"ckpt_path={resolved.get('ckpt_path')}: "):
            check_resume(ckpt, kwargs)
    return Plan(task, model, data_cfg, dict(resolved["tokenizer"]), kwargs, output_dir, ckpt, resolved, init)
