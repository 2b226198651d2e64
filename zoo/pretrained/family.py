"""A pretrained family converts one Hugging Face `model_type` both ways: config.json <-> ModelConfig and
state dict <-> zoo state dict. Families register in FAMILIES under their `model_type`."""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.registry import Registry

FAMILIES: Registry = Registry("model_type")

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


def is_buffer(name: str) -> bool:
    """Whether checkpoint tensor `name` is a buffer on the `BUFFERS` list (not a weight)."""
    return _BUFFER.search(name) is not None


class Family:
    """Subclasses set `model_type` / `architecture` and implement the four conversions."""

    model_type: str = ""
    architecture: str = ""  # the transformers class an export is written for
    prefixes: tuple[str, ...] = ()  # base-model prefix of the task model (absent in bare-model checkpoints)
    same_model: frozenset[str] = frozenset()  # config keys written in an equivalent form (see roundtrip.py)

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        raise NotImplementedError

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        """HF config.json content; raises ValueError naming every knob this family cannot express."""
        raise NotImplementedError

    def state_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def state_to_hf(self, state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def fitted(self, cfg: ModelConfig, src: HFTensors) -> ModelConfig:
        """`cfg` adjusted to what the weight file holds (zoo.pretrained.heads: a bare model's optional pooler)."""
        return cfg

    def read_back(self, hf: dict[str, Any], cfg: ModelConfig) -> ModelConfig:
        """The config an export's config.json `hf` of model `cfg` loads as (the export guard compares them)."""
        return self.config_from_hf(hf)

    def label_names(self, hf: dict[str, Any], cfg: ModelConfig) -> list[str] | None:
        """The class names of a classifier head from config.json (None: no named classes)."""
        return None

    def label_config(self, cfg: ModelConfig, names: Sequence[str] | None) -> dict[str, Any]:
        """config.json keys naming a classifier's classes ({} for heads without named classes)."""
        return {}

    def head_origins(self, head: str) -> dict[str, str]:
        """zoo head tensor -> the checkpoint tensor it is read from in this family's `head` class ({}: unknown,
        so init_from reuses a head tensor only for the same head)."""
        return {}


class HFTensors:
    """The checkpoint's tensors, consumed by name with an expected shape. Missing names are collected and
    reported together; a wrong shape raises at once naming the tensor and both shapes."""

    def __init__(self, tensors: dict[str, torch.Tensor], source: str, prefixes: Sequence[str] = ()) -> None:
        self.source = source
        self.tensors = {k: t for k, t in tensors.items() if not is_buffer(k)}
        self.prefix = ""
        for prefix in prefixes:  # e.g. "transformer." present in GPT2LMHeadModel, absent in GPT2Model
            if any(k.startswith(prefix) for k in self.tensors):
                self.prefix = prefix
                break
        self.missing: list[str] = []
        self.head_optional = False  # init_from: a head the file lacks is made fresh, not an error
        self.new_head: list[str] = []  # the head tensors it lacked then

    def key(self, name: str) -> str:
        """The stored name of `name`: `~` marks a name outside the base model prefix (e.g. `lm_head.weight`)."""
        return name[1:] if name.startswith("~") else self.prefix + name

    def has(self, name: str) -> bool:
        return self.key(name) in self.tensors

    def take(self, name: str, shape: Sequence[int]) -> torch.Tensor:
        key = self.key(name)
        if key not in self.tensors:
            self.missing.append(key)
            return torch.zeros(tuple(shape))
        tensor = self.tensors.pop(key)
        if tuple(tensor.shape) != tuple(shape):
            raise ValueError(
                f"Tensor {key!r} in {self.source} has shape {tuple(tensor.shape)} but config.json implies "
                f"{tuple(shape)}."
            )
        return tensor.float() if tensor.is_floating_point() else tensor

    def take_optional(self, name: str, shape: Sequence[int]) -> torch.Tensor | None:
        return self.take(name, shape) if self.has(name) else None

    def discard(self, name: str) -> None:
        self.tensors.pop(self.key(name), None)

    def take_token_table(self, name: str, cfg: ModelConfig) -> torch.Tensor:
        """The token table `name` (vocab_size, d_model). A tied checkpoint may store either tensor of the pair
        (transformers loads one holding only `lm_head.weight`): then the stored head is the table."""
        shape = (cfg.vocab_size, cfg.d_model)
        if cfg.tie_embeddings and not self.has(name) and self.has("~lm_head.weight"):
            return self.take("~lm_head.weight", shape)
        return self.take(name, shape)

    def finish(self, unused_ok: dict[str, str] | None = None) -> None:
        """Raise for missing tensors; raise for leftovers unless a family said why they are unused (warn)."""
        if self.missing:
            shown = ", ".join(self.missing[:8]) + (f" and {len(self.missing) - 8} more" if len(self.missing) > 8 else "")
            raise ValueError(f"{self.source} is missing {len(self.missing)} tensor(s) the model needs: {shown}.")
        leftover = sorted(self.tensors)
        explained = {k: why for k in leftover for pat, why in (unused_ok or {}).items() if pat in k}
        unknown = [k for k in leftover if k not in explained]
        if unknown:
            shown = ", ".join(unknown[:8]) + (f" and {len(unknown) - 8} more" if len(unknown) > 8 else "")
            raise ValueError(
                f"{self.source} holds {len(unknown)} tensor(s) zoo does not know how to load: {shown}. "
                f"The checkpoint uses a feature this converter does not support."
            )
        if explained:
            reasons = sorted(set(explained.values()))
            warnings.warn(
                f"Ignoring {len(explained)} tensor(s) of {self.source} ({', '.join(sorted(explained)[:4])}...): "
                f"{'; '.join(reasons)}.",
                stacklevel=3,
            )


def require(hf: dict[str, Any], model_type: str, checks: dict[str, tuple[Any, Any]]) -> None:
    """Raise if any config.json key holds a value zoo cannot reproduce: {key: (value, supported)}."""
    bad = [f"{k}={v!r} (supported: {ok!r})" for k, (v, ok) in checks.items() if v != ok]
    if bad:
        raise ValueError(f"{model_type} config.json uses settings zoo does not support: {', '.join(bad)}.")


def special_id(hf: dict[str, Any], key: str, vocab_size: int, default: int | None) -> int | None:
    """A token id from config.json; an id outside the vocabulary (e.g. GPT-2's 50256 in a tiny test
    config) cannot index anything, so it is replaced by `default` with a warning."""
    value = hf.get(key)
    if isinstance(value, list):  # generation configs may list several eos ids; zoo keeps the first
        value = value[0] if value else None
    if value is None:
        return default
    if not 0 <= int(value) < vocab_size:
        warnings.warn(f"config.json {key}={value} is outside the vocabulary [0, {vocab_size}); using {default}.", stacklevel=3)
        return default
    return int(value)


def hf_activation(name: str, model_type: str) -> str:
    """HF activation name -> zoo activation name."""
    mapping = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": None,
               "relu": "relu", "silu": "silu", "swish": "silu"}
    if mapping.get(name) is None:
        allowed = sorted(k for k, v in mapping.items() if v)
        raise ValueError(f"{model_type} activation {name!r} is not supported; supported: {', '.join(allowed)}.")
    return mapping[name]


ZOO_TO_HF_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}


def unsupported(cfg: ModelConfig, model_type: str, checks: dict[str, tuple[Any, Any]]) -> None:
    """Export guard: raise naming every zoo knob whose value the HF family cannot express."""
    bad = [f"model.{k}={v!r} (needs {ok!r})" for k, (v, ok) in checks.items() if v != ok]
    if bad:
        raise ValueError(f"This zoo model cannot be exported as {model_type!r}: {', '.join(bad)}.")
