"""A family's tensors as one declarative map (torchtune's `_FROM_HF`, inverted for export too): rows of zoo
name pattern -> the Hugging Face tensor(s) it is. `load` reads every tensor the zoo model has through its row,
`save` writes each one back. A `{field}` matches one part of a name (`{i}` a layer, `{p}` weight or bias) and
carries into the HF names. Shapes come from the zoo model (built on the meta device), so rows name tensors
only. A row of several HF names stacks them row-wise ([q | k | v], [gate | up]); `Op` marks a tensor stored
otherwise."""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from zoo.config import ModelConfig
from zoo.models import build_model

# Tensors that checkpoints store but that are buffers computed from config.json, not weights: dropped by name
# (anchored patterns, so a real weight never matches). A weight zoo does not know stays an error (`finish`).
BUFFERS: dict[str, str] = {
    r"(^|\.)embeddings\.position_ids$": "BERT-family position ids (an arange)",
    r"(^|\.)embeddings\.token_type_ids$": "BERT-family default token types (zeros)",
    r"(^|\.)rotary_emb\.(original_)?inv_freq$": "RoPE inverse frequencies (from rope_theta)",
    r"(^|\.)h\.\d+\.attn\.(masked_)?bias$": "GPT-2's causal mask buffers",
    r"(^|\.)layers\.\d+\.attention\.(masked_)?bias$": "GPT-NeoX's causal mask buffers",
}
_BUFFER = re.compile("|".join(f"(?:{p})" for p in BUFFERS))
_LEGACY = {"gamma": "weight", "beta": "bias"}  # TF-era LayerNorm names, renamed on load as transformers does


def is_buffer(name: str) -> bool:
    """Whether checkpoint tensor `name` is a buffer on the `BUFFERS` list (not a weight)."""
    return _BUFFER.search(name) is not None


def stored_name(name: str, prefix: str) -> str:
    """A row's name as stored by a class whose base model is under `prefix` (`~`: outside the base model)."""
    return name[1:] if name.startswith("~") else prefix + name


class ShapeMismatch(ValueError):
    """A checkpoint tensor whose shape is not the one config.json implies (zoo.pretrained.headers names the
    config key behind it)."""

    def __init__(self, key: str, source: str, have: tuple[int, ...], want: tuple[int, ...]) -> None:
        super().__init__(f"Tensor {key!r} in {source} has shape {have} but config.json implies {want}.")
        self.key, self.source, self.have, self.want = key, source, have, want


class HFTensors:
    """The checkpoint's tensors, consumed by name with an expected shape (a name read twice, a shared table,
    is the same tensor). Missing names are collected and reported together; a wrong shape raises at once
    naming the tensor and both shapes."""

    def __init__(self, tensors: dict[str, torch.Tensor], source: str, prefixes: Sequence[str] = ()) -> None:
        self.source = source
        self.tensors = {}
        for key, tensor in tensors.items():
            stem, _, last = key.rpartition(".")
            if not is_buffer(key):
                self.tensors[f"{stem}.{_LEGACY[last]}" if stem and last in _LEGACY else key] = tensor
        self.prefix = next((p for p in prefixes if any(k.startswith(p) for k in self.tensors)), "")
        self.taken: dict[str, torch.Tensor] = {}
        self.missing: list[str] = []
        self.head_optional = False  # init_from: a head the file lacks is made fresh, not an error
        self.new_head: list[str] = []  # the head tensors it lacked then

    def key(self, name: str) -> str:
        """The stored name of `name`: `~` marks a name outside the base-model prefix (`lm_head.weight`)."""
        return stored_name(name, self.prefix)

    def has(self, name: str) -> bool:
        return self.key(name) in self.tensors

    def take(self, name: str, shape: Sequence[int]) -> torch.Tensor:
        key = self.key(name)
        if key not in self.taken:
            if key not in self.tensors:
                self.missing.append(key)
                return torch.zeros(tuple(shape))
            self.taken[key] = self.tensors.pop(key)
        tensor = self.taken[key]
        if tuple(tensor.shape) != tuple(shape):
            raise ShapeMismatch(key, self.source, tuple(tensor.shape), tuple(shape))
        return tensor.float() if tensor.is_floating_point() else tensor

    def take_optional(self, name: str, shape: Sequence[int]) -> torch.Tensor | None:
        return self.take(name, shape) if self.has(name) else None

    def discard(self, name: str) -> None:
        self.tensors.pop(self.key(name), None)

    def finish(self, unused_ok: Mapping[str, str] | None = None) -> None:
        """Raise for missing tensors; raise for leftovers unless a family said why they are unused (warn)."""
        if self.missing:
            raise ValueError(f"{self.source} is missing {len(self.missing)} tensor(s) the model needs: "
                             f"{_some(self.missing)}.")
        leftover = sorted(self.tensors)
        explained = {k: why for k in leftover for pat, why in (unused_ok or {}).items() if pat in k}
        unknown = [k for k in leftover if k not in explained]
        if unknown:
            raise ValueError(
                f"{self.source} holds {len(unknown)} tensor(s) zoo does not know how to load: "
                f"{_some(unknown)}. The checkpoint uses a feature this converter does not support."
            )
        if explained:
            warnings.warn(
                f"Ignoring {len(explained)} tensor(s) of {self.source} ({', '.join(sorted(explained)[:4])}"
                f"...): {'; '.join(sorted(set(explained.values())))}.",
                stacklevel=3,
            )


def _some(names: list[str]) -> str:
    return ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")


@dataclass(frozen=True)
class Op:
    """An HF tensor stored otherwise than zoo's: `t` transposed (GPT-2's Conv1D), `heads` with q/k/v
    interleaved per head (GPT-NeoX)."""

    kind: str
    hf: str


Rows = Mapping[str, str | tuple[str, ...] | Op]


def heads_to_blocks(t: torch.Tensor, heads: int) -> torch.Tensor:
    """GPT-NeoX rows (H, 3, D) -> zoo rows (3, H, D): [q_0 k_0 v_0 q_1 ...] -> [q_0 q_1 ... | k | v]."""
    return t.reshape(heads, 3, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


def blocks_to_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """The inverse of `heads_to_blocks`: zoo rows (3, H, D) -> GPT-NeoX rows (H, 3, D)."""
    return t.reshape(3, heads, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


Convert = Callable[[torch.Tensor, int], torch.Tensor]
# op -> (HF shape of a zoo shape, HF tensor -> zoo tensor, zoo tensor -> HF tensor); the int is the head count
OPS: dict[str, tuple[Callable[[tuple[int, ...]], tuple[int, ...]], Convert, Convert]] = {
    "copy": (lambda s: s, lambda t, h: t, lambda t, h: t),
    "t": (lambda s: s[::-1], lambda t, h: t.t().contiguous(), lambda t, h: t.t()),
    "heads": (lambda s: s, heads_to_blocks, blocks_to_heads),
}


def within(zoo: str, hf: str, rows: Rows) -> dict:
    """`rows` with `zoo` / `hf` in front of every name (a layer's rows under `decoder_stack.layers.{i}.`)."""
    def put(value):
        if isinstance(value, Op):
            return Op(value.kind, hf + value.hf)
        return hf + value if isinstance(value, str) else tuple(hf + v for v in value)
    return {zoo + z: put(h) for z, h in rows.items()}


@functools.lru_cache(maxsize=1024)
def _regex(pattern: str) -> re.Pattern:
    return re.compile(re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^.]+)", re.escape(pattern)))


def _match(rows: Rows, name: str) -> tuple[str, list[str]] | None:
    """(op, HF names) of the first row matching zoo tensor `name`."""
    for pattern, value in rows.items():
        found = _regex(pattern).fullmatch(name)
        if found:
            kind, names = (value.kind, [value.hf]) if isinstance(value, Op) else (
                "copy", [value] if isinstance(value, str) else list(value))
            return kind, [n.format(**found.groupdict()) for n in names]
    return None


def _sizes(name: str, rows: int, parts: int, cfg: ModelConfig) -> list[int]:
    """Row counts of the stacked parts: equal, but attention's k and v have `n_kv_heads` heads."""
    if parts == 3 and ".qkv." in name:
        q = cfg.n_heads * cfg.head_size
        return [q, (rows - q) // 2, (rows - q) // 2]
    return [rows // parts] * parts


def load(rows: Rows, src: HFTensors, shapes: Mapping[str, tuple[int, ...]], cfg: ModelConfig
         ) -> dict[str, torch.Tensor]:
    """Each zoo tensor of `shapes` (name -> shape) a row names, read from `src`."""
    out = {}
    for name, shape in shapes.items():
        found = _match(rows, name)
        if found is None:
            continue
        kind, names = found
        if len(names) > 1:
            sizes = _sizes(name, shape[0], len(names), cfg)
            out[name] = torch.cat([src.take(n, (s, *shape[1:])) for n, s in zip(names, sizes, strict=True)])
        else:
            hf_shape, to_zoo, _ = OPS[kind]
            out[name] = to_zoo(src.take(names[0], hf_shape(tuple(shape))), cfg.n_heads)
    return out


def save(rows: Rows, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str
         ) -> dict[str, torch.Tensor]:
    """The HF tensors of every zoo tensor in `state` a row names, under the base-model `prefix`."""
    out = {}
    for name, tensor in state.items():
        found = _match(rows, name)
        if found is None:
            continue
        kind, names = found
        parts = (tensor.split(_sizes(name, tensor.shape[0], len(names), cfg)) if len(names) > 1
                 else [OPS[kind][2](tensor, cfg.n_heads)])
        out.update({stored_name(n, prefix): part for n, part in zip(names, parts, strict=True)})
    return out


def zoo_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the zoo model `cfg` builds, with its shape (built on the meta device: no memory)."""
    with torch.device("meta"):
        return {k: tuple(t.shape) for k, t in build_model(cfg).state_dict().items()}
