"""Corpus kinds and the source registry: a name in ``data.name`` maps to a loader returning a split corpus.

``SOURCES.get(name)(**data_cfg_keys, seed=...) -> TextCorpus | PairCorpus | LabelledCorpus`` (and the tagged
and QA corpora of ``token_tags`` and ``squad``). A corpus answers for itself: its content hash per split
(``fingerprint``, part of the cache key), the text a tokenizer trains on (``tokenizer_docs``) and its cache
arrays (``encode``).
"""

from __future__ import annotations

import hashlib
import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zoo.data.cache import hash_texts
from zoo.data.documents import Documents, TextList
from zoo.data.pretokenize import bytes_name, encode_documents, pretokenize
from zoo.options import BOOL, TEXT, Options, check_entry, integer, number, optional
from zoo.registry import Registry

SCORED_SPLITS = ("val", "test")  # text splits evaluation scores: their tokens' source bytes are kept
# arrays held in memory (name -> RaggedIds or int64 array), and a writer of arrays streamed to disk or None
Encoded = tuple[dict[str, Any], Callable[[Path], dict[str, str]] | None]


@dataclass(frozen=True)
class TextCorpus:
    """Documents for LM/MLM as streams, never held whole unless they are (``TextList``): large files,
    ``datasets`` columns."""

    train_docs: Documents
    val_docs: Documents
    kind = "text"

    def documents(self) -> dict[str, Documents]:
        return {"train": self.train_docs, "val": self.val_docs}

    def fingerprint(self) -> dict[str, str]:
        """split -> content hash (one streaming pass, which also checks the text, e.g. UTF-8, before work)."""
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

    def encode(self, tokenizer, fingerprints: dict[str, str]) -> Encoded:
        """Nothing in memory: each split is pre-tokenised straight into the entry's temporary folder, refused
        when its text no longer hashes to `fingerprints` (what the key was made from); the scored splits also
        keep the source bytes each token spells (`<split>.tokens.bytes`: what bits per byte divides by)."""

        def stream(folder: Path) -> dict[str, str]:
            arrays = {}
            for split, docs in self.documents().items():
                scored = split in SCORED_SPLITS
                pretokenize(tokenizer, docs, folder, f"{split}.tokens", append_eos=True, count_bytes=scored,
                            fingerprint=fingerprints[split])
                arrays[f"{split}.tokens"] = "ragged"
                if scored:
                    arrays[bytes_name(f"{split}.tokens")] = "uint32"
            return arrays

        return {}, stream


class HeldCorpus:
    """A corpus read into memory: ``content()`` (split -> texts) is what its fingerprint hashes."""

    train: list
    val: list

    def splits(self) -> dict[str, list]:
        return {"train": self.train, "val": self.val}

    def content(self) -> dict[str, list[str]]:
        raise NotImplementedError

    def fingerprint(self) -> dict[str, str]:
        return {split: hash_texts(texts) for split, texts in self.content().items()}


@dataclass(frozen=True)
class PairCorpus(HeldCorpus):
    """Parallel ``(src, tgt)`` pairs for seq2seq; ``test`` may be empty."""

    train: list[tuple[str, str]]
    val: list[tuple[str, str]]
    test: list[tuple[str, str]] = field(default_factory=list)
    kind = "pairs"

    def splits(self) -> dict[str, list[tuple[str, str]]]:
        return {"train": self.train, "val": self.val, "test": self.test}

    def content(self) -> dict[str, list[str]]:
        return {name: [s for pair in rows for s in pair] for name, rows in self.splits().items()}

    def tokenizer_docs(self) -> Documents:
        return TextList([s for pair in self.train for s in pair])  # one shared vocabulary for both sides

    def encode(self, tokenizer, fingerprints: dict[str, str] | None = None) -> Encoded:
        """``<split>.src`` and ``<split>.tgt`` token ids (no framing: the datasets frame them)."""
        return {f"{split}.{side}": encode_documents(tokenizer, [pair[k] for pair in rows], append_eos=False)
                for split, rows in self.splits().items() for k, side in enumerate(("src", "tgt"))}, None


@dataclass(frozen=True)
class LabelledCorpus(HeldCorpus):
    """``(text, label_id)`` examples; ``label_names[label_id]`` is the original label."""

    train: list[tuple[str, int]]
    val: list[tuple[str, int]]
    label_names: list[str]
    kind = "labelled"

    def content(self) -> dict[str, list[str]]:
        return {**{name: [f"{y}\t{t}" for t, y in rows] for name, rows in self.splits().items()},
                "labels": self.label_names}

    def tokenizer_docs(self) -> Documents:
        return TextList([text for text, _ in self.train])

    def encode(self, tokenizer, fingerprints: dict[str, str] | None = None) -> Encoded:
        """``<split>.text`` token ids and ``<split>.labels`` (int64)."""
        arrays: dict[str, Any] = {}
        for split, rows in self.splits().items():
            arrays[f"{split}.text"] = encode_documents(tokenizer, [t for t, _ in rows], append_eos=False)
            arrays[f"{split}.labels"] = np.array([y for _, y in rows], dtype=np.int64)
        return arrays, None


SourceFn = Callable[..., Any]  # keyword options (and seed, kind when it takes them) -> a corpus
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
# what load_source passes a source that takes it, not data.* keys; `whole`: every example in every split, no
# held-out fraction (evaluate.py split=all scores a user's file whole); sources reading a user file take it
INJECTED = ("seed", "kind", "whole")


def register_source(name: str) -> Callable[[SourceFn], SourceFn]:
    """Decorator: `@register_source("text")` makes a loader available as `data.name=text`."""
    return SOURCES.register(name)


def source_keys(name: str) -> set[str]:
    """Config keys accepted by source ``name`` (its keyword parameters, minus the injected ones)."""
    return set(inspect.signature(SOURCES.get(name)).parameters) - set(INJECTED)


def data_options(name: str) -> Options:
    """data.* keys of source ``name``: its keyword parameters (typed by their hints) and the loader keys."""
    return Options.of(SOURCES.get(name), skip=INJECTED).extended(LOADER_OPTIONS.rules)


def check_data_cfg(cfg: dict[str, Any]) -> None:
    """Every key known to the source, required ones set, every value allowed; raises ValueError."""
    check_entry("data", cfg.get("name"), cfg, data_options, SOURCES)


def load_source(cfg: dict[str, Any], seed: int, kind: str | None = None, whole: bool = False) -> Any:
    """Validate ``cfg`` against the source's parameters and load it. A source that takes ``kind`` (one
    that can give any corpus kind, e.g. ``hf``) is told the kind the task needs; ``whole=True`` asks for
    every example of the data in each split (a source that cannot: ValueError naming those that can)."""
    check_data_cfg(cfg)
    source, keys = SOURCES.get(cfg["name"]), source_keys(cfg["name"])
    params = inspect.signature(source).parameters
    if whole and "whole" not in params:
        raise ValueError(f"data={cfg['name']} has fixed splits and reads no file of yours, so it cannot be "
                         f"scored whole; sources read whole: {', '.join(whole_sources())}")
    values = (seed, kind or "text", whole)
    injected = {k: v for k, v in zip(INJECTED, values, strict=True) if k in params}
    return source(**{k: v for k, v in cfg.items() if k in keys}, **injected)


def whole_sources() -> list[str]:
    """The sources that can give their data whole (load_source(..., whole=True)): those reading your file."""
    return [name for name in SOURCES.names() if "whole" in inspect.signature(SOURCES.get(name)).parameters]


def check_fraction(value: float, key: str = "data.val_fraction") -> None:
    """A fraction strictly between 0 and 1, else the one ValueError every source gives."""
    if not 0.0 < value < 1.0:
        raise ValueError(f"{key}={value!r} must be in (0, 1)")


def check_not_whole(whole: bool, key: str, value: Any) -> None:
    """A source's own validation data (`key`, e.g. data.val_path) has no place when the data is read whole."""
    if whole and value is not None:
        raise ValueError(f"{key}={value!r}: the data is read whole (evaluate.py split=all scores every "
                         f"example of data.path), so there is no separate validation data; leave {key} out")


def hash_fraction(text: str) -> float:
    """A stable number in [0, 1) derived from ``text`` (md5, independent of PYTHONHASHSEED)."""
    return int.from_bytes(hashlib.md5(text.encode("utf-8")).digest()[:8], "big") / 2**64


def val_count(n: int, val_fraction: float) -> int:
    """Validation examples of ``n``: ``val_fraction`` of them, at least one, leaving at least one to train."""
    return min(n - 1, max(1, round(n * val_fraction)))


def split_rows(rows: list, val_fraction: float, seed: int, whole: bool = False) -> tuple[list, list]:
    """A seeded shuffle of ``rows`` into (train, val), each in the original order; both non-empty. ``whole``:
    every row in both, in file order (nothing held out: the data scored whole)."""
    check_fraction(val_fraction)
    if whole:
        return list(rows), list(rows)
    if len(rows) < 2:
        raise ValueError(f"need at least 2 examples to make a train/validation split, got {len(rows)}")
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_val = val_count(len(rows), val_fraction)
    return [rows[i] for i in sorted(order[n_val:])], [rows[i] for i in sorted(order[:n_val])]
