"""The unfused layout of zoo's fused projections, for tensor parallelism (zoo.training.tensor_parallel).

zoo fuses self-attention's q, k, v into one `qkv` Linear ([q | k | v] rows), cross-attention's k, v into `kv`
and a gated FFN's gate and value into `up` ([gate | value] rows). A column split of a fused weight would give
one rank all of q and part of k (and with GQA no contiguous split is right), so a tensor-parallel run first
`unfuse`s: each fused Linear becomes a `FusedColumns` holding one Linear per part (`qkv.q`, `qkv.k`, `qkv.v`;
`kv.k`, `kv.v`; `up.gate`, `up.value`) with the same rows, whose output is their concatenation. Each part
is then split by heads (or hidden units) on its own, and the module reading the output is told its local
sizes. The part names sit below the fused name, so a state dict says its layout by its keys alone and
`fuse_state_dict` turns one back into the fused layout every other tool reads (a pure key converter)."""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import nn

# fused Linear name -> its parts, in row order (the layout `fuse_state_dict` writes back)
FUSED_PARTS: dict[str, tuple[str, ...]] = {"qkv": ("q", "k", "v"), "kv": ("k", "v"), "up": ("gate", "value")}
# a part's tensor: `<fused>.<part>.<param>`; LoRA adapters (zoo.modules.lora) keep lora_A / lora_B beside
_FUSED = "|".join(FUSED_PARTS)
_UNFUSED_KEY = re.compile(rf"^(?P<fused>(?:.*\.)?(?:{_FUSED}))\.(?P<part>\w+)"
                          r"(?:\.(?P<param>weight|bias|lora_A|lora_B))?$")
SHARED_PARAMS = ("lora_A",)  # one tensor every part uses (a fused adapter's A): fused back as it is


class FusedColumns(nn.Module):
    """Linear parts computed side by side, outputs concatenated on the last dim: a fused Linear, unfused."""

    def __init__(self, parts: Mapping[str, nn.Linear]) -> None:
        super().__init__()
        for name, linear in parts.items():
            self.add_module(name, linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([part(x) for part in self.children()], dim=-1)  # (..., sum of the parts' widths)


def split_rows(linear: nn.Linear, sizes: Mapping[str, int]) -> dict[str, nn.Linear]:
    """`linear` as one Linear per block of output rows (`sizes`: part name -> its rows, in order), weights and
    bias copied."""
    if sum(sizes.values()) != linear.out_features:
        raise ValueError(f"parts {dict(sizes)} do not add up to the {linear.out_features} outputs")
    parts, start = {}, 0
    for name, size in sizes.items():
        part = nn.Linear(linear.in_features, size, bias=linear.bias is not None,
                         device=linear.weight.device, dtype=linear.weight.dtype)
        with torch.no_grad():
            part.weight.copy_(linear.weight[start:start + size])
            if linear.bias is not None:
                part.bias.copy_(linear.bias[start:start + size])
        part.weight.requires_grad_(linear.weight.requires_grad)  # frozen stays frozen (LoRA, freeze)
        if linear.bias is not None:
            part.bias.requires_grad_(linear.bias.requires_grad)
        parts[name], start = part, start + size
    return parts


def unfuse(model: nn.Module) -> nn.Module:
    """Replace, in place, every fused projection of `model` by its parts (same values): self-attention's
    `qkv`, cross-attention's `kv`, a gated FFN's `up`. Returns the model."""
    from zoo.modules.attention import Attention
    from zoo.modules.feedforward import FeedForward

    for module in list(model.modules()):
        if isinstance(module, Attention):
            kv_dim, q_dim = module.n_kv_heads * module.head_dim, module.n_heads * module.head_dim
            name, sizes = ("kv", {"k": kv_dim, "v": kv_dim}) if module.cross else (
                "qkv", {"q": q_dim, "k": kv_dim, "v": kv_dim})
        elif isinstance(module, FeedForward) and module.activation.gated:
            half = module.up.out_features // 2
            name, sizes = "up", {"gate": half, "value": half}
        else:
            continue
        fused = getattr(module, name)
        if isinstance(fused, nn.Linear):  # a layer that splits otherwise (a LoRA adapter) says how
            split = getattr(fused, "split_rows", None)
            setattr(module, name, FusedColumns(split(sizes) if split else split_rows(fused, sizes)))
    return model


def tensor_layout(model: nn.Module) -> str | None:
    """"unfused" when `model` holds unfused projections (its state dict has their parts), else None."""
    return "unfused" if any(isinstance(m, FusedColumns) for m in model.modules()) else None


def _part(name: str) -> re.Match | None:
    """The match of a module path or parameter name inside an unfused projection's part, else None."""
    match = _UNFUSED_KEY.match(name)
    return match if match and match["part"] in FUSED_PARTS[match["fused"].rsplit(".", 1)[-1]] else None


def is_unfused_key(key: str) -> bool:
    """Whether a state-dict key names a part of an unfused projection (`...qkv.q.weight`)."""
    match = _part(key)
    return bool(match and match["param"])


def fused_name(name: str) -> str:
    """A module path or parameter name of the unfused layout in the fused one (`x.qkv.q` -> `x.qkv`,
    `x.qkv.q.weight` -> `x.qkv.weight`); other names unchanged."""
    match = _part(name)
    if not match:
        return name
    return f"{match['fused']}.{match['param']}" if match["param"] else match["fused"]


def fused_names(names: list[str]) -> list[str]:
    """`fused_name` of each of `names`, each result once, in first-seen order."""
    return list(dict.fromkeys(fused_name(n) for n in names))


def fuse_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` with every unfused projection's parts concatenated back into the fused tensor
    (`x.qkv.q.weight`, `x.qkv.k.weight`, `x.qkv.v.weight` -> `x.qkv.weight`), in the fused row order; other
    keys (and their order) unchanged. ValueError when a part is missing."""
    fused: dict[str, dict[str, torch.Tensor]] = {}
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        match = _part(key)
        if not (match and match["param"]):
            out[key] = value
            continue
        target = f"{match['fused']}.{match['param']}"
        if target not in fused:
            fused[target] = {}
            out[target] = None  # keeps the fused key where its first part was
        fused[target][match["part"]] = value
    for target, parts in fused.items():
        order = FUSED_PARTS[target.rsplit(".", 2)[-2]]
        missing = [p for p in order if p not in parts]
        if missing:
            raise ValueError(f"{target}: unfused part(s) {missing} missing (has {sorted(parts)})")
        shared = target.rsplit(".", 1)[-1] in SHARED_PARAMS  # every part holds the same tensor
        out[target] = parts[order[0]] if shared else torch.cat([parts[p] for p in order], dim=0)
    return out
