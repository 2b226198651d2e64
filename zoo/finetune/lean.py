"""The lean load of a method that `loads_lean` (finetune=qlora) with init_from: the model is built on the meta
device, each layer the method quantises is filled from the init_from weights just before it is quantised
(its float tensor let go once the NF4 codes exist), and the other tensors are placed as they are. The float
base never exists whole: the load's peak is the quantised model, the float tensors it keeps (embeddings,
norms, head) and one layer, instead of the whole float model built, loaded and then quantised.

It gives the eager load's tensors: the same NF4 codes, the same float tensors (tests/finetune/test_lean.py).
The random draws differ: the eager load draws every weight's init before overwriting it, so the adapters'
initial A (and a fresh head) come from another point of the random stream."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from zoo.config import ModelConfig
from zoo.finetune.init_from import usable_state
from zoo.finetune.methods import Applied, apply_finetune
from zoo.models.base import init_module


def lean_refusal(model: nn.Module, missing: list[str]) -> str | None:
    """Why the meta-device `model` cannot be filled tensor by tensor (None when it can): a buffer no state
    dict holds (computed in its module's constructor), or a fresh parameter whose module cannot draw it."""
    saved = set(model.state_dict())
    derived = [n for n, _ in model.named_buffers() if n not in saved]
    if derived:
        return f"{derived[0]} is a buffer its module computes when built"
    for name in missing:
        module = model.get_submodule(name.rpartition(".")[0])
        if not hasattr(module, "reset_parameters"):
            return f"the fresh {name} belongs to a {type(module).__name__}, which cannot draw it again"
    return None


def _place(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """`value` as the model's own tensor: `like`'s dtype, a copy (not a view of a mapped file)."""
    return value.to(dtype=like.dtype, copy=True)


def _fill_rest(model: nn.Module, usable: dict[str, torch.Tensor], init_std: float) -> None:
    """Every tensor still on the meta device, from `usable` (consumed) or, for a fresh one, drawn as the
    model's init draws it (its module's reset, then N(0, init_std) for a linear or embedding weight, zero
    bias). A tied tensor is placed once and shared again."""
    placed: dict[int, torch.Tensor] = {}
    drawn: dict[int, nn.Module] = {}
    for path, module in model.named_modules():
        for kind in ("_parameters", "_buffers"):
            for name, tensor in list(getattr(module, kind).items()):
                if tensor is None or not tensor.is_meta:
                    continue
                key = f"{path}.{name}" if path else name
                if id(tensor) not in placed:
                    if key in usable:
                        value = _place(usable.pop(key), tensor)
                    else:  # fresh (lean_refusal made sure its module draws it)
                        value, drawn[id(module)] = torch.empty_like(tensor, device="cpu"), module
                    placed[id(tensor)] = (nn.Parameter(value, requires_grad=tensor.requires_grad)
                                          if kind == "_parameters" else value)
                getattr(module, kind)[name] = placed[id(tensor)]
                usable.pop(key, None)  # a tied tensor's second name
    with torch.no_grad():
        for module in drawn.values():
            module.reset_parameters()
            init_module(module, init_std)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise ValueError(f"the lean load left {left[0]} unfilled")


def build_lean(cfg: ModelConfig, state: dict[str, torch.Tensor], source: str, model_type: str | None,
               finetune_cfg: Mapping[str, Any]) -> tuple[nn.Module, list[str], Applied] | str:
    """`cfg` built on the meta device, the finetune method applied with each layer it quantises arriving from
    `state`, the rest placed from `state`: (model, fresh parameter names, what the method did). `state` is
    consumed (emptied), so each tensor is let go once placed. A model that cannot be filled this way is
    not built: the reason (a str) comes back, and `state` is left whole for the eager load."""
    from zoo.presets import build

    with torch.device("meta"):
        model = build(cfg)
    usable, missing = usable_state(model, state, source, model_type)
    why = lean_refusal(model, missing)
    if why is not None:
        return why
    state.clear()  # the tensors are in `usable` alone now: each goes once placed
    names = {id(p): n for n, p in model.named_parameters()}
    fresh = sorted({names[id(p)] for n, p in model.named_parameters(remove_duplicate=False) if n in missing})

    def arriving(path: str) -> nn.Linear:
        """The float layer at `path`, its weight taken from `usable` (or drawn, when fresh)."""
        meta = model.get_submodule(path)
        layer = nn.Linear(meta.in_features, meta.out_features, bias=meta.bias is not None, device="meta")
        layer.weight.requires_grad_(meta.weight.requires_grad)
        if meta.bias is not None:
            layer.bias.requires_grad_(meta.bias.requires_grad)
        _fill_rest(layer, {k.removeprefix(f"{path}."): usable.pop(k) for k in list(usable)
                           if k.startswith(f"{path}.")}, cfg.init_std)
        return layer

    applied = apply_finetune(model, finetune_cfg, fresh, arriving=arriving)
    _fill_rest(model, usable, cfg.init_std)
    if model_type is not None:
        model.pretrained_family = model_type
    return model, fresh, applied
