"""Fine-tuning methods by name (`finetune=full|lora|qlora|freeze`): each decides which parameters train. A
method is a function `(model, fresh, **options) -> Applied`; its keyword parameters are its `finetune.*` keys,
their hints the values allowed. `fresh` names the parameters that did not come from `init_from` (a new
classifier head): they always train, whatever the method freezes."""

from __future__ import annotations

import inspect
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any

from torch import nn

from zoo.finetune.freeze import freeze as freeze_modules
from zoo.finetune.lora import add_lora
from zoo.finetune.qlora import Arriving, add_qlora
from zoo.modules.qlora import BLOCK_SIZES
from zoo.options import TEXT, Options, check_entry, integer, list_of, number, one_of
from zoo.registry import Registry

FINETUNES: Registry = Registry("finetune method", key="finetune.name")
DEFAULT_LORA_TARGETS = ("self_attn.qkv", "self_attn.o")


@dataclass
class Applied:
    """What a method did, in one line for the run's log."""

    description: str


def _train_fresh(model: nn.Module, fresh: Collection[str]) -> None:
    for name, param in model.named_parameters():
        if name in fresh:
            param.requires_grad_(True)


@FINETUNES.register("full")
def full(model: nn.Module, fresh: Collection[str] = ()) -> Applied:
    """Every parameter trains."""
    model.requires_grad_(True)
    return Applied("every parameter trains (finetune=full)")


@FINETUNES.register("lora")
def lora(
    model: nn.Module, fresh: Collection[str] = (), *,
    rank: Annotated[int, integer(1)] = 8,
    alpha: Annotated[float, number(0, low_open=True)] = 16.0,
    dropout: Annotated[float, number(0, 1, high_open=True)] = 0.0,
    targets: Annotated[list[str], list_of(TEXT)] = DEFAULT_LORA_TARGETS,
) -> Applied:
    """Freeze the model, add rank-`rank` adapters scaled by alpha / rank to the `targets` layers."""
    model.requires_grad_(False)
    paths = add_lora(model, rank=rank, alpha=alpha, dropout=dropout, targets=list(targets))
    _train_fresh(model, fresh)
    return Applied(f"LoRA rank {rank}, alpha {alpha:g} on {len(paths)} layers ({', '.join(targets)})")


@FINETUNES.register("qlora")
def qlora(
    model: nn.Module, fresh: Collection[str] = (), *,
    rank: Annotated[int, integer(1)] = 8,
    alpha: Annotated[float, number(0, low_open=True)] = 16.0,
    dropout: Annotated[float, number(0, 1, high_open=True)] = 0.0,
    targets: Annotated[list[str], list_of(TEXT)] = (),
    block_size: Annotated[int, one_of(*BLOCK_SIZES)] = 64,
    arriving: Arriving | None = None,
) -> Applied:
    """Freeze the model; hold the `targets` layers (empty: every linear layer outside the head) in 4-bit NF4
    blocks of `block_size` weights (bitsandbytes) with rank-`rank` fp32 adapters on them. `arriving` (not a
    config key): the lean load's reader of each float layer (zoo.finetune.lean)."""
    model.requires_grad_(False)
    paths = add_qlora(model, rank=rank, alpha=alpha, dropout=dropout, targets=list(targets),
                      block_size=block_size, arriving=arriving)
    _train_fresh(model, fresh)
    which = ", ".join(targets) if targets else "every linear layer outside the head"
    held = sum(model.get_submodule(p).in_features * model.get_submodule(p).out_features for p in paths)
    return Applied(f"QLoRA rank {rank}, alpha {alpha:g} on {len(paths)} layers ({which}), their {held:,} "
                   f"base weights in NF4 (block_size {block_size}; buffers, not counted as parameters)")


# trainer.strategy -> why the method cannot train under it (checked by the plan, before any process starts)
qlora.refused_strategies = MappingProxyType({
    "fsdp_tp": "its 4-bit base (NF4 codes packed two a byte, one absmax per block along each row) cannot be "
               "split by rows or columns across tensor-parallel ranks; use trainer=fsdp (it shards the "
               "adapters and keeps the NF4 base whole on every rank) or finetune=lora"})


@FINETUNES.register("freeze")
def freeze(
    model: nn.Module, fresh: Collection[str] = (), *,
    modules: Annotated[list[str], list_of(TEXT)] = (),
    first_layers: Annotated[int, integer(0)] = 0,
) -> Applied:
    """Freeze `modules` (zoo module names: `embed`, `head`, `decoder_stack.layers.0`, ...) and the first
    `first_layers` layers of every stack."""
    if not modules and not first_layers:
        raise ValueError("finetune=freeze freezes nothing: set finetune.modules (e.g. [embed]) and/or "
                         "finetune.first_layers")
    model.requires_grad_(True)
    frozen = freeze_modules(model, list(modules), first_layers)
    _train_fresh(model, fresh)
    return Applied(f"frozen: {', '.join(frozen)}")


def refused_strategies(name: str) -> Mapping[str, str]:
    """trainer.strategy -> why finetune=`name` cannot train under it ({} for most methods)."""
    return getattr(FINETUNES.get(name), "refused_strategies", MappingProxyType({}))


def check_strategy_for(cfg: Mapping[str, Any], strategy: str) -> None:
    """ValueError naming finetune and trainer.strategy when the method cannot train under that strategy."""
    name = cfg.get("name", "full")
    why = refused_strategies(name).get(strategy)
    if why is not None:
        raise ValueError(f"finetune={name} cannot train under trainer.strategy={strategy}: {why}")


def finetune_options(name: str) -> Options:
    """finetune.* keys of method `name`: its keyword parameters, plus `name`."""
    return Options.of(FINETUNES.get(name), skip=("model", "fresh", "arriving")).extended({"name": TEXT})


def check_finetune(cfg: Mapping[str, Any]) -> None:
    """Name (an unknown one is refused by finetune_options), keys and values of the finetune group
    (ValueError naming the key)."""
    check_entry("finetune", cfg.get("name", "full"), cfg, finetune_options, FINETUNES.names())


def loads_lean(cfg: Mapping[str, Any]) -> bool:
    """Whether the method builds its model layer by layer from the init_from weights (zoo.finetune.lean)."""
    return "arriving" in inspect.signature(FINETUNES.get(cfg.get("name", "full"))).parameters


def apply_finetune(model: nn.Module, cfg: Mapping[str, Any], fresh: Collection[str] = (),
                   arriving: Arriving | None = None) -> Applied:
    """Apply `finetune: {name, ...}` to `model` in place; ValueError when it leaves nothing to train.
    `arriving`: for a method that `loads_lean`, the reader of each float layer of a meta-device model."""
    check_finetune(cfg)
    name, options = cfg.get("name", "full"), {k: v for k, v in cfg.items() if k != "name"}
    if arriving is not None:
        options["arriving"] = arriving
    applied = FINETUNES.get(name)(model, fresh, **options)
    if not any(p.requires_grad for p in model.parameters()):
        settings = "".join(f" finetune.{k}={v}" for k, v in options.items() if k != "arriving")
        parts = ", ".join(n for n, _ in model.named_children())
        raise ValueError(f"finetune={name}{settings} leaves no parameter to train ({applied.description}); "
                         f"freeze less of the model (its parts: {parts})")
    return applied


def trainable_counts(model: nn.Module) -> tuple[int, int]:
    """(trainable, total) unique parameters (tied tensors counted once)."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def trainable_line(model: nn.Module) -> str:
    trainable, total = trainable_counts(model)
    return f"trainable parameters: {trainable:,} of {total:,} ({100 * trainable / max(total, 1):.2f}%)"
