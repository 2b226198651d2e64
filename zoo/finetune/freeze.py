"""Partial fine-tuning: freeze named parts of a model (`embed`, `decoder_stack.layers.0`, `head`, ...) and/or
the first N layers of every stack; everything else trains."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from zoo.modules.block import Stack
from zoo.registry import unknown_choice_message


def stack_layers(model: nn.Module, first: int | None = None) -> list[str]:
    """The names of the layers of every stack (`decoder_stack.layers.0`), or of each stack's `first` ones."""
    return [f"{name}.layers.{i}" for name, module in model.named_modules() if isinstance(module, Stack)
            for i in range(len(module.layers) if first is None else first)]


def check_freeze(model: nn.Module, modules: Sequence[str], first_layers: int) -> None:
    """ValueError for a module name the model does not have (listing the names) or more layers than a
    stack has."""
    allowed = [n for n, _ in model.named_children()] + stack_layers(model)  # what finetune.modules accepts
    for name in modules:
        if name not in allowed:
            raise ValueError("finetune.modules: " + unknown_choice_message("module", name, allowed))
    for stack in (m for m in model.modules() if isinstance(m, Stack)):
        if first_layers > len(stack.layers):
            raise ValueError(f"finetune.first_layers={first_layers} but a stack of this model has only "
                             f"{len(stack.layers)} layers")


def freeze(model: nn.Module, modules: Sequence[str], first_layers: int = 0) -> list[str]:
    """Set requires_grad=False on `modules` and on layers [0, first_layers) of every stack; returns what
    froze."""
    check_freeze(model, modules, first_layers)
    frozen = [*modules, *stack_layers(model, first_layers)]
    for name in frozen:
        model.get_submodule(name).requires_grad_(False)
    return frozen


def frozen_names(model: nn.Module) -> list[str]:
    """What does not train, each part named once by its largest wholly frozen module (`embed`,
    `decoder_stack.layers.0`) or else by the parameter (`...qkv.weight` under LoRA); `*`: the whole model."""
    names: list[str] = []

    def visit(module: nn.Module, prefix: str) -> None:
        params = list(module.parameters())
        if params and not any(p.requires_grad for p in params):
            names.append(prefix.rstrip(".") or "*")
            return
        names.extend(prefix + n for n, p in module.named_parameters(recurse=False) if not p.requires_grad)
        for child_name, child in module.named_children():
            visit(child, f"{prefix}{child_name}.")

    visit(model, "")
    return names
