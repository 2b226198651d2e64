"""Which layers finetune=qlora holds in 4 bits: the `targets` (as finetune=lora names them) or, by default,
every linear layer outside the output head, as QLoRA adapts them all. Every chosen layer is checked before
any is replaced (one ValueError naming the first that does not fit, or bitsandbytes missing), then adapted
with zoo.modules.qlora.QLoRALinear."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn

from zoo.finetune.lora import check_targets
from zoo.modules.heads.base import OutputHead
from zoo.modules.lora import adapt
from zoo.modules.qlora import QLoRALinear, bitsandbytes, nf4_refusal


def body_linears(model: nn.Module) -> list[str]:
    """Paths of the nn.Linear layers outside the output head (whose weight may be the tied embeddings)."""
    heads = [n for n, m in model.named_modules() if isinstance(m, OutputHead)]
    return [n for n, m in model.named_modules() if type(m) is nn.Linear and n
            and not any(n == h or n.startswith(f"{h}.") for h in heads)]


# path -> the float nn.Linear of that path, read when asked for (zoo.finetune.lean: each layer of a
# meta-device model arrives from the init_from weights just before it is quantised)
Arriving = Callable[[str], nn.Linear]


def add_qlora(model: nn.Module, *, rank: int, alpha: float, dropout: float, targets: Sequence[str],
              block_size: int, arriving: Arriving | None = None) -> list[str]:
    """Replace each chosen nn.Linear by a QLoRALinear with an NF4 base (in place); returns the paths. With
    `arriving`, each layer is first replaced by the float layer it gives, then quantised, one at a time."""
    if targets:
        paths = sorted({p for ps in check_targets(model, targets).values() for p in ps})
    else:
        paths = body_linears(model)
        if not paths:
            linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
            raise ValueError(f"finetune=qlora: {type(model).__name__} has no nn.Linear layer outside its "
                             "output head to hold in 4 bits (its linear layers: "
                             f"{', '.join(linears) or 'none'})")
    for path in paths:
        why = nf4_refusal(model.get_submodule(path), block_size)
        if why is not None:
            raise ValueError(f"finetune=qlora: layer {path} cannot be held in NF4: {why}")
    bitsandbytes()  # missing: one error before anything is replaced, also on the meta model of the checks
    for path in paths:
        if arriving is not None:
            model.set_submodule(path, arriving(path))
        adapt(model, [path], rank=rank, alpha=alpha, dropout=dropout, layer=QLoRALinear,
              block_size=block_size)
    return paths
