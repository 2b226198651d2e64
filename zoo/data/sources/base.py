"""Corpus types and the source registry: a name in ``data.name`` maps to a loader returning a split corpus.

``SOURCES.get(name)(**data_cfg_keys, seed=...) -> TextCorpus | PairCorpus | LabelledCorpus``.
Built-in sources need no download: ``stdlib_text`` (the interpreter's own ``.py`` files) and
``translation_toy`` (a seeded Korean->English template set). User sources read local files.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zoo.options import TEXT, Options, check_entry, integer, number, optional
from zoo.registry import Registry


@dataclass(frozen=True)
class TextCorpus:
    """Documents for LM/MLM; each split is a list of texts."""

    train: list[str]
    val: list[str]
    kind = "text"

    def tokenizer_texts(self) -> list[str]:
        return self.train

    def content(self) -> dict[str, list[str]]:
        return {"train": self.train, "val": self.val}


@dataclass(frozen=True)
class PairCorpus:
    """Parallel ``(src, tgt)`` pairs for seq2seq; ``test`` may be empty."""

    train: list[tuple[str, str]]
    val: list[tuple[str, str]]
    test: list[tuple[str, str]] = field(default_factory=list)
    kind = "pairs"

    def tokenizer_texts(self) -> list[str]:
        return [s for pair in self.train for s in pair]  # one shared vocabulary for both sides

    def content(self) -> dict[str, list[str]]:
        splits = {"train": self.train, "val": self.val, "test": self.test}
        return {name: [s for pair in rows for s in pair] for name, rows in splits.items()}


@dataclass(frozen=True)
class LabelledCorpus:
    """``(text, label_id)`` examples; ``label_names[label_id]`` is the original label."""

    train: list[tuple[str, int]]
    val: list[tuple[str, int]]
    label_names: list[str]
    kind = "labelled"

    def tokenizer_texts(self) -> list[str]:
        return [text for text, _ in self.train]

    def content(self) -> dict[str, list[str]]:
        out = {
            name: [f"{y}\t{t}" for t, y in rows] for name, rows in (("train", self.train), ("val", self.val))
        }
        out["labels"] = self.label_names
        return out


Corpus = TextCorpus | PairCorpus | LabelledCorpus
SourceFn = Callable[..., Corpus]
SOURCES: Registry[SourceFn] = Registry("data source", key="data.name")
# Keys every data config may carry; consumed by the data module, not by the source loader.
LOADER_OPTIONS = Options({
    "name": TEXT,
    "num_workers": integer(0),
    "blocks_per_epoch": optional(integer(1)),  # LM/MLM windows per epoch
    "mask_prob": number(0, 1, low_open=True, high_open=True),  # MLM: fraction of tokens picked
})
LOADER_KEYS = set(LOADER_OPTIONS.rules)


def register_source(name: str) -> Callable[[SourceFn], SourceFn]:
    """Decorator: `@register_source("text")` makes a loader available as `data.name=text`."""
    return SOURCES.register(name)


def source_keys(name: str) -> set[str]:
    """Config keys accepted by source ``name`` (its keyword parameters, minus the injected ``seed``)."""
    params = inspect.signature(SOURCES.get(name)).parameters
    return {p for p in params if p != "seed"}


def data_options(name: str) -> Options:
    """data.* keys of source ``name``: its keyword parameters (typed by their hints) and the loader keys."""
    return Options.of(SOURCES.get(name), skip=("seed",)).extended(LOADER_OPTIONS.rules)


def check_data_cfg(cfg: dict[str, Any]) -> None:
    """Every key known to the source, required ones set, every value allowed; raises ValueError."""
    check_entry("data", cfg.get("name"), cfg, data_options, SOURCES)


def load_source(cfg: dict[str, Any], seed: int) -> Corpus:
    """Validate ``cfg`` against the source's parameters and load it."""
    check_data_cfg(cfg)
    source = SOURCES.get(cfg["name"])
    kwargs = {k: v for k, v in cfg.items() if k in source_keys(cfg["name"])}
    if "seed" in inspect.signature(source).parameters:
        kwargs["seed"] = seed
    return source(**kwargs)


def split_indices(
    n: int, val_fraction: float, seed: int, key: str = "data.val_fraction"
) -> tuple[list[int], list[int]]:
    """Seeded shuffle of ``range(n)`` into (train, val); both non-empty when ``n >= 2``."""
    import random

    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"{key}={val_fraction!r} must be in (0, 1)")
    if n < 2:
        raise ValueError(f"need at least 2 examples to make a train/validation split, got {n}")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_val = min(n - 1, max(1, round(n * val_fraction)))
    return sorted(order[n_val:]), sorted(order[:n_val])
