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

from zoo.data.cache import hash_texts
from zoo.data.documents import Documents, TextList
from zoo.options import BOOL, TEXT, Options, check_entry, integer, number, optional
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

    def documents(self) -> dict[str, Documents]:
        """split -> its documents as a stream (what the cache key hashes and pre-tokenisation reads)."""
        return {"train": TextList(self.train), "val": TextList(self.val)}

    def fingerprint(self) -> dict[str, str]:
        return {split: docs.fingerprint() for split, docs in self.documents().items()}

    def tokenizer_docs(self) -> Documents:
        return self.documents()["train"]


@dataclass(frozen=True)
class TextStreams:
    """Documents for LM/MLM that are read lazily, never held whole (large files, ``datasets`` columns)."""

    train_docs: Documents
    val_docs: Documents
    kind = "text"

    def documents(self) -> dict[str, Documents]:
        return {"train": self.train_docs, "val": self.val_docs}

    def fingerprint(self) -> dict[str, str]:
        """split -> content hash (one streaming pass; it also checks the text, e.g. UTF-8, before any work)."""
        return {split: docs.fingerprint() for split, docs in self.documents().items()}

    def tokenizer_docs(self) -> Documents:
        return self.train_docs

    @property
    def train(self) -> list[str]:
        """The training documents read into memory (small corpora and tests only)."""
        return ["".join(doc) for doc in self.train_docs.blocks()]

    @property
    def val(self) -> list[str]:
        return ["".join(doc) for doc in self.val_docs.blocks()]


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

    def fingerprint(self) -> dict[str, str]:
        return {split: hash_texts(texts) for split, texts in self.content().items()}

    def tokenizer_docs(self) -> Documents:
        return TextList(self.tokenizer_texts())


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

    def fingerprint(self) -> dict[str, str]:
        return {split: hash_texts(texts) for split, texts in self.content().items()}

    def tokenizer_docs(self) -> Documents:
        return TextList(self.tokenizer_texts())


Corpus = TextCorpus | TextStreams | PairCorpus | LabelledCorpus
SourceFn = Callable[..., Corpus]
SOURCES: Registry[SourceFn] = Registry("data source", key="data.name")
# Keys every data config may carry; consumed by the data module, not by the source loader.
LOADER_OPTIONS = Options({
    "name": TEXT,
    "num_workers": integer(0),
    "blocks_per_epoch": optional(integer(1)),  # LM/MLM windows per epoch
    "mask_prob": number(0, 1, low_open=True, high_open=True),  # MLM: fraction of tokens picked
    "document_mask": BOOL,  # LM/MLM: attention and positions stay inside each packed document
    "max_tokens": optional(integer(1)),  # seq2seq/classification: padded tokens per batch and process
    "truncate": BOOL,  # cut examples longer than model.max_seq_len (counted) instead of refusing them
    "shards": integer(1),  # LM/MLM: the training stream's contiguous parts; a rank reads only its own
    "doc_stride": optional(integer(0)),  # QA: context tokens shared by consecutive windows (null: a quarter)
    "max_answer_len": optional(integer(1)),  # QA: tokens of a predicted answer at most (null: 30)
})
LOADER_KEYS = set(LOADER_OPTIONS.rules)


def register_source(name: str) -> Callable[[SourceFn], SourceFn]:
    """Decorator: `@register_source("text")` makes a loader available as `data.name=text`."""
    return SOURCES.register(name)


def source_keys(name: str) -> set[str]:
    """Config keys accepted by source ``name`` (its keyword parameters, minus the injected ``seed``)."""
    params = inspect.signature(SOURCES.get(name)).parameters
    return {p for p in params if p not in ("seed", "kind")}


def data_options(name: str) -> Options:
    """data.* keys of source ``name``: its keyword parameters (typed by their hints) and the loader keys."""
    return Options.of(SOURCES.get(name), skip=("seed", "kind")).extended(LOADER_OPTIONS.rules)


def check_data_cfg(cfg: dict[str, Any]) -> None:
    """Every key known to the source, required ones set, every value allowed; raises ValueError."""
    check_entry("data", cfg.get("name"), cfg, data_options, SOURCES)


def load_source(cfg: dict[str, Any], seed: int, kind: str | None = None) -> Corpus:
    """Validate ``cfg`` against the source's parameters and load it. A source that takes ``kind`` (one
    that can give any corpus kind, e.g. ``hf``) is told the kind the task needs."""
    check_data_cfg(cfg)
    source = SOURCES.get(cfg["name"])
    kwargs = {k: v for k, v in cfg.items() if k in source_keys(cfg["name"])}
    params = inspect.signature(source).parameters
    if "seed" in params:
        kwargs["seed"] = seed
    if "kind" in params:
        kwargs["kind"] = kind or "text"
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
