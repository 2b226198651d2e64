"""LoRA (Hu et al. 2021): a frozen linear layer W plus a trained low-rank update,
y = W x + b + (alpha / r) B A x, with A (r, in) drawn like nn.Linear's weight and B (out, r) zero, so the
adapted model equals the base model exactly until the first step. `merge_lora` folds B A into W and turns
the layer back into a plain nn.Linear, so an exported model has no trace of the adapters.

Targets are zoo module names without the layer index: `self_attn.qkv` names the fused q/k/v projection of
every layer of every stack, `decoder_stack.ffn.up` only the decoder's; `lora_target_names(model)` lists them.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from zoo.registry import unknown_choice_message

LAYER_INDEX = re.compile(r"\.layers\.\d+")


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

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rank={self.lora_A.shape[0]}, scaling={self.scaling:g}"


def generic_name(path: str) -> str:
    """`decoder_stack.layers.3.self_attn.qkv` -> `decoder_stack.self_attn.qkv` (what every layer shares)."""
    return LAYER_INDEX.sub("", path)


def lora_target_names(model: nn.Module) -> list[str]:
    """Every name a target may use (sorted): each linear layer's generic name (`decoder_stack.ffn.up`) and its
    form without the stack (`ffn.up`, every stack's)."""
    full = {generic_name(n) for n, m in model.named_modules() if isinstance(m, nn.Linear) and n}
    return sorted(full | {".".join(n.split(".")[-2:]) for n in full})


def _shared_weights(model: nn.Module) -> set[int]:
    """ids of parameters registered under more than one name (a tied output head)."""
    seen = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    return {i for i, n in seen.items() if n > 1}


def check_targets(model: nn.Module, targets: Sequence[str]) -> dict[str, list[str]]:
    """target -> the module paths it adapts; ValueError naming a target that matches nothing (with every
    name allowed) or a layer whose weight is tied to another (merging would change both)."""
    if not targets:
        raise ValueError("finetune.targets is empty; name at least one of: "
                         + ", ".join(lora_target_names(model)))
    linears = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and n}
    shared = _shared_weights(model)
    found: dict[str, list[str]] = {}
    for target in targets:
        paths = [n for n in linears if f".{generic_name(n)}".endswith(f".{target}")]  # whole or its end
        if not paths:
            raise ValueError("finetune.targets: "
                             + unknown_choice_message("LoRA target module", target, lora_target_names(model)))
        tied = [n for n in paths if id(linears[n].weight) in shared]
        if tied:
            raise ValueError(f"finetune.targets: {target!r} adapts {tied[0]}, whose weight is tied to the "
                             "token embeddings (model.tie_embeddings): merging the update would change both. "
                             "Pick other targets.")
        found[target] = paths
    return found


def add_lora(model: nn.Module, *, rank: int, alpha: float, dropout: float, targets: Sequence[str]
             ) -> list[str]:
    """Replace each targeted nn.Linear by a LoRALinear (in place); returns the adapted module paths."""
    paths = sorted({p for ps in check_targets(model, targets).values() for p in ps})
    adapt(model, paths, rank=rank, alpha=alpha, dropout=dropout)
    return paths


def adapt(model: nn.Module, paths: Sequence[str], *, rank: int, alpha: float, dropout: float) -> None:
    """Put a LoRALinear at each module path (an nn.Linear)."""
    for path in paths:
        parent_name, _, child = path.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, LoRALinear(getattr(parent, child), rank, alpha, dropout))


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
            "paths": sorted(adapted)}


def restore_lora(model: nn.Module, record: Any, where: str) -> None:
    """Adapters from a `lora_record` (ValueError naming `where` for a record that does not fit the model)."""
    try:
        adapt(model, list(record["paths"]), rank=int(record["rank"]), alpha=float(record["alpha"]),
              dropout=float(record["dropout"]))
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise ValueError(f"{where}: the LoRA record {record!r} does not fit the model "
                         f"({type(e).__name__}: {e})") from None
