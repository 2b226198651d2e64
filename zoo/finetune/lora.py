"""Which layers finetune=lora adapts: targets are zoo module names without the layer index
(`self_attn.qkv` names the fused q/k/v projection of every layer of every stack, `decoder_stack.ffn.up` only
the decoder's; `lora_target_names(model)` lists them), checked against the model, then adapted with the
LoRA layer of zoo.modules.lora (LoRALinear, merge_lora: a floor down, where the checkpoint format and
zoo.load rebuild and merge a run's adapters).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from torch import nn

from zoo.modules.lora import LoRALinear, adapt, has_lora, merge_lora
from zoo.registry import unknown_choice_message

__all__ = ["LoRALinear", "add_lora", "check_targets", "generic_name", "has_lora", "lora_target_names",
           "merge_lora"]

LAYER_INDEX = re.compile(r"\.layers\.\d+")


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
