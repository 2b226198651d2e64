"""LoRA (Hu et al. 2021) as a layer: a frozen linear layer W plus a trained low-rank update,
y = W x + b + (alpha / r) B A x, with A (r, in) drawn like nn.Linear's weight and B (out, r) zero, so the
adapted model equals the base model exactly until the first step. `merge_lora` folds B A into W and turns
the layer back into a plain nn.Linear, so an exported model has no trace of the adapters.

Core floor, so the checkpoint format can rebuild a fine-tuning run's adapters (`lora_record` is what it
saves, zoo.modules.adapters.restore_lora rebuilds from it) and zoo.load can merge them; which layers a run
adapts (`finetune.targets`) is zoo.finetune.lora's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class LoRALinear(nn.Linear):
    """An nn.Linear whose `weight` / `bias` are the base layer's own parameters (same names in the state dict,
    ties kept) with `lora_A`, `lora_B` beside them."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float, *,
                 lora_A: nn.Parameter | None = None) -> None:  # noqa: N803 (the parameter's name)
        """`lora_A`: an A to share (split_rows) instead of a new one."""
        nn.Module.__init__(self)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight, self.bias = base.weight, base.bias
        kind = {"device": base.weight.device, "dtype": base.weight.dtype}
        if lora_A is None:
            lora_A = nn.Parameter(torch.empty(rank, self.in_features, **kind))
            nn.init.kaiming_uniform_(lora_A, a=math.sqrt(5))  # nn.Linear's own weight init
        self.lora_A = lora_A
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, rank, **kind))
        self.scaling = alpha / rank
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = F.linear(F.linear(self.lora_dropout(x), self.lora_A), self.lora_B)  # (..., r) -> (..., out)
        return F.linear(x, self.weight, self.bias) + self.scaling * update

    def split_rows(self, sizes: dict[str, int]) -> dict[str, LoRALinear]:
        """One adapter per block of output rows (`sizes`, in order; zoo.modules.unfused): each the base's and
        B's rows, all sharing this A, so together they are this adapter (A's gradient sums over them)."""
        from zoo.modules.unfused import split_rows

        rank, start, parts = self.lora_A.shape[0], 0, {}
        dropout = self.lora_dropout.p if isinstance(self.lora_dropout, nn.Dropout) else 0.0
        for name, base in split_rows(self, sizes).items():
            part = LoRALinear(base, rank, self.scaling * rank, dropout, lora_A=self.lora_A)
            with torch.no_grad():
                part.lora_B.copy_(self.lora_B[start:start + base.out_features])
            parts[name], start = part, start + base.out_features
        return parts

    def merged(self) -> nn.Linear:
        """A plain nn.Linear with W + (alpha / r) B A (the base parameters are updated in place)."""
        plain = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device="meta")
        with torch.no_grad():
            self.weight += self.scaling * (self.lora_B @ self.lora_A)
        plain.weight, plain.bias = self.weight, self.bias
        return plain

    def base_record(self) -> dict[str, Any]:
        """What a checkpoint records of the base beyond the adapters (a float base: nothing)."""
        return {}

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rank={self.lora_A.shape[0]}, scaling={self.scaling:g}"


def applied_weight(layer: nn.Linear) -> torch.Tensor:
    """The (out, in) matrix `layer` applies: W, or for a LoRA layer W + (alpha / r) B A (what a caller that
    folds the matrix into others, as latent attention's cache, must use)."""
    if isinstance(layer, LoRALinear):
        return layer.weight + layer.scaling * (layer.lora_B @ layer.lora_A)
    return layer.weight


def adapt(model: nn.Module, paths: Sequence[str], *, rank: int, alpha: float, dropout: float,
          layer: type[LoRALinear] = LoRALinear, **base: Any) -> None:
    """Put a `layer` (LoRALinear, or QLoRALinear with its `block_size` in `base`) at each module path (an
    nn.Linear)."""
    for path in paths:
        parent_name, _, child = path.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, layer(getattr(parent, child), rank, alpha, dropout, **base))


def has_lora(model: nn.Module) -> bool:
    return any(isinstance(m, LoRALinear) for m in model.modules())


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every adapter into its base weight and put plain nn.Linear layers back (in place)."""
    for path, module in list(model.named_modules()):
        if isinstance(module, LoRALinear):
            model.set_submodule(path, module.merged())
    return model


def lora_record(model: nn.Module) -> dict[str, Any] | None:
    """The plain-data record of the model's adapters (saved in checkpoints, so `restore_lora` can rebuild the
    same layers before loading the weights); None without adapters."""
    adapted = {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}
    if not adapted:
        return None
    first = next(iter(adapted.values()))
    rank = first.lora_A.shape[0]
    dropout = first.lora_dropout.p if isinstance(first.lora_dropout, nn.Dropout) else 0.0
    return {"rank": int(rank), "alpha": float(first.scaling * rank), "dropout": float(dropout),
            "paths": sorted(adapted), **first.base_record()}
