"""The fine-tuning part of `plan.prepare` and `run.train`: read `init_from` (config, overrides, tokenizer) and
check `finetune` before any data is read; build the model with the pretrained weights and apply the method."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from zoo.config import ModelConfig, lay_over, nest_paths
from zoo.finetune.given import command_line, given_in_group, group_given
from zoo.finetune.init_from import (
    Source,
    build_initialised,
    check_tokenizer_fits,
    fit_to_tokenizer,
    load_state,
    open_source,
    with_overrides,
)
from zoo.finetune.labels import order_labels, reindex
from zoo.finetune.lean import build_lean
from zoo.finetune.methods import Applied, apply_finetune, check_finetune, loads_lean, trainable_line
from zoo.modules.head_settings import HEAD
from zoo.tokenizers import ZooTokenizer


@dataclass
class InitPlan:
    """What `init_from` decided: the source, its config with the user's overrides, where the tokenizer comes
    from (the source's own unless `tokenizer` was given), whether a new head replaces the source's
    (`fresh_head`: one of the same kind, asked for with model.head), and the names of a reused head's outputs
    (`labels`)."""

    value: str
    source: Source
    model: ModelConfig
    own_tokenizer: bool
    notes: list[str]
    new_head: bool = False
    fresh_head: bool = False
    labels: list[str] | None = None


def plan_init(resolved: Mapping[str, Any], task_head: str | None) -> InitPlan | None:
    """None without init_from. `task_head`: the head an explicitly named task needs (a classification task on
    a pretrained encoder gets a fresh classifier head). ValueError for anything wrong, before any data."""
    if resolved.get("init_from") in (None, ""):
        return None
    value = str(resolved["init_from"])
    source = open_source(value)
    overrides, notes = command_line(), []
    if overrides is None:  # composed in code, not by train.py: the command line is unknown
        overrides = []
        notes.append("init_from outside a Hydra run: model.* keys of the composed config are not applied, "
                     "the tokenizer is the init_from one")
    if any(o.split("=", 1)[0].lstrip("+~") == "model" for o in overrides):
        raise ValueError(f"init_from={value} takes the architecture from {source.kind} {value}; drop the "
                         "model=... choice (model.* keys that keep the weight shapes still apply, e.g. "
                         "model.dropout=0.1)")
    pretrained = source.config()
    changes = given_in_group("model", overrides, dict(resolved["model"]))
    folder_labels = source.label_names()
    head_changes = {k.removeprefix("head."): v for k, v in changes.items() if k.startswith("head.")}
    given = changes.get("head")
    if isinstance(given, Mapping):  # model.head={name: ..., key: ...}
        head_changes = {**{k: v for k, v in given.items() if k != "name"}, **head_changes}
        given = given.get("name")
    old = pretrained.head.name
    # model.head=<the folder's own labelled head> given: a fresh one of that kind, its labels from the data
    fresh_head = folder_labels is not None and given == old
    if fresh_head:
        notes.append(f"model.head={old} given: a fresh {old} head replaces the pretrained one (its labels "
                     "from the data)")
    if task_head is not None and task_head != old and given is None:
        given = task_head
    new_head = given is not None and given != old
    if new_head or fresh_head:  # built as the source's family builds it, the user's keys over it
        head = HEAD.merge(HEAD.parse({"name": given, **source.head_keys(given)}), head_changes)
        if hasattr(head, "num_labels"):
            head = head.replaced(num_labels=head_changes.get("num_labels", 0))  # 0: the data gives it
        if new_head:
            notes.append(f"a new {given} head replaces the pretrained {old} head")
    else:
        head = HEAD.merge(pretrained.head, head_changes)
    saved = pretrained.to_dict()
    rest = {k: v for k, v in changes.items() if k != "head" and not k.startswith("head.")}
    merged = lay_over(saved, nest_paths(rest))  # a key the chosen entry does not read: ValueError naming it
    merged["head"] = head.to_data()
    changed = {k: v for k, v in merged.items() if k not in saved or v != saved[k]}
    model = with_overrides(pretrained, changed, value)
    own = not group_given("tokenizer", overrides)
    if own and not source.has_tokenizer():
        raise ValueError(f"init_from={value}: {source.kind} {value} has no tokenizer (no tokenizer.json); "
                         "give the tokenizer the model was trained with: tokenizer=hf tokenizer.path=FOLDER "
                         "or tokenizer=file tokenizer.path=tokenizer.json")
    check_tokenizer_fits(source, model, value, None if own else dict(resolved["tokenizer"]))  # before data
    reused_labels = None if new_head or fresh_head else folder_labels  # the head's outputs keep their names
    return InitPlan(value, source, model, own, notes, new_head or fresh_head, fresh_head, reused_labels)


def check_finetune_cfg(cfg: Mapping[str, Any], model: ModelConfig, init: InitPlan | None = None
                       ) -> torch.nn.Module:
    """finetune.* keys and values, then the method applied to a meta-device model (names it reads exist,
    something trains); returns that model, for checks of what trains. A new head of `init` trains (fresh)."""
    from zoo.presets import build

    check_finetune(cfg)
    with torch.device("meta"):
        meta = build(model)
    fresh = [n for n, _ in meta.named_parameters() if n.startswith("head.")] if init and init.new_head else []
    apply_finetune(meta, cfg, fresh)
    return meta


# ------------------------------------------------------------------------------------------ at run time


@dataclass
class Initialised:
    state: dict[str, torch.Tensor]
    tokenizer_cfg: dict[str, Any] | None
    tokenizer: ZooTokenizer | None  # the one tokenizer_cfg reads, built once


def read_init(init: InitPlan, output_dir: Path, finetune_cfg: Mapping[str, Any] | None = None) -> Initialised:
    """The pretrained weights (read before any data, so a corrupt file stops the run early; for a method
    that loads lean, mapped where the source's format allows) and the tokenizer (and its config) of the
    source when it supplies the tokenizer."""
    state = load_state(init.source, init.value, lean=loads_lean(finetune_cfg or {}))
    if not init.own_tokenizer:
        return Initialised(state, None, None)
    return Initialised(state, init.source.tokenizer_cfg(output_dir), init.source.shipped_tokenizer)


def align_labels(init: InitPlan | None, tokenizer, datamodule) -> None:
    """A reused labelled head keeps its outputs' names: the data's labels are indexed in the folder's id2label
    order (the run's label names become the folder's); ValueError for data labels the folder lacks."""
    data = getattr(datamodule, "label_names", None)
    if init is None or init.labels is None or data is None:
        return
    order = order_labels(init.labels, data, f"init_from={init.value}", init.model.head.name)
    if order.note:
        init.notes.append(order.note)
    reindex(datamodule, tokenizer, order)


def final_config(init: InitPlan | None, completed: ModelConfig, tokenizer) -> ModelConfig:
    """The config the data completed; with init_from the pretrained vocabulary size is kept."""
    return completed if init is None else fit_to_tokenizer(init.model, completed, tokenizer, init.value)


def build_model(init: InitPlan | None, state: dict[str, torch.Tensor] | None, config: ModelConfig,
                finetune_cfg: Mapping[str, Any]) -> tuple[torch.nn.Module, Applied]:
    """The model to train: pretrained weights in place (init_from), then the finetune method applied. A lean
    load consumes `state` (each tensor let go once placed)."""
    from zoo.presets import build

    fresh: list[str] = []
    if init is None:
        model = build(config)
    else:
        state = state if state is not None else {}
        if init.fresh_head:  # model.head named the folder's own head: none of its tensors are kept
            for key in [k for k in state if k.startswith("head.")]:
                del state[key]
        if loads_lean(finetune_cfg):  # each layer quantised as it arrives: no whole float model
            built = build_lean(config, state, init.value, init.source.model_type, finetune_cfg)
            if not isinstance(built, str):
                model, fresh, applied = built
                applied.description += "; loaded layer by layer (the float base never built whole)"
                return model, _noted(applied, fresh)
            init.notes.append(f"the float model is built before it is quantised: {built}")
        model, fresh = build_initialised(config, state, init.value, init.source.model_type)
    return model, _noted(apply_finetune(model, finetune_cfg, fresh), fresh)


def _noted(applied: Applied, fresh: list[str]) -> Applied:
    if fresh:
        applied.description += f"; new (trained from scratch): {', '.join(fresh)}"
    return applied


def announce(model: torch.nn.Module, applied: Applied, init: InitPlan | None) -> None:
    if init is not None:
        print(f"[zoo] init_from {init.source.kind} {init.value}" + "".join(f"; {n}" for n in init.notes))
    print(f"[zoo] {applied.description}")
    print(f"[zoo] {trainable_line(model)}")
