"""User data sources: plain text files (LM/MLM), parallel pairs (seq2seq), labelled JSONL."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from zoo.data.documents import FileSpan, FileSpans, file_spans
from zoo.data.readers import expand_files, read_labelled, read_pairs
from zoo.data.sources.base import (
    LabelledCorpus,
    PairCorpus,
    TextCorpus,
    check_fraction,
    register_source,
    split_rows,
)


@register_source("text")
def load_text(*, files: str | Sequence[str], val_fraction: float = 0.1, whole: bool = False) -> TextCorpus:
    """One file, several files or a glob, read lazily (any size): each file's tail (``val_fraction`` of its
    bytes, cut after a newline) becomes validation text (``whole``: every file whole in both splits). UTF-8
    is checked as the text is read."""
    check_fraction(val_fraction)
    paths = expand_files(files)
    if whole:
        spans = [FileSpan(path, 0, os.path.getsize(path)) for path in paths]
        train = val = [span for span in spans if span.has_text()]
    else:
        train, val = file_spans(paths, val_fraction)
    if not train:
        names = ", ".join(str(p) for p in paths[:5]) + (" ..." if len(paths) > 5 else "")
        raise ValueError(f"data.files: corpus is empty or whitespace-only ({names})")
    if not val:
        raise ValueError(f"data.files: the validation split (last {val_fraction:.0%} of each file) is empty")
    return TextCorpus(FileSpans(tuple(train)), FileSpans(tuple(val)))


@register_source("pairs")
def load_pairs(
    *,
    path: str,
    format: str = "auto",
    src_field: str = "src",
    tgt_field: str = "tgt",
    val_fraction: float = 0.1,
    seed: int = 0,
    whole: bool = False,
) -> PairCorpus:
    """TSV (``src<TAB>tgt``) or JSONL pairs with a seeded train/validation split (``whole``: all pairs in
    both)."""
    return PairCorpus(*split_rows(read_pairs(path, format, src_field, tgt_field), val_fraction, seed, whole))


@register_source("classification")
def load_classification(
    *,
    path: str,
    text_field: str = "text",
    label_field: str = "label",
    val_fraction: float = 0.1,
    seed: int = 0,
    whole: bool = False,
) -> LabelledCorpus:
    """Labelled JSONL; labels sorted and mapped to ids ``0..K-1`` (``whole``: all examples in both
    splits)."""
    rows = read_labelled(path, text_field, label_field)
    label_names, to_id = label_ids((label for _, label in rows), f"{path}: field {label_field!r}")
    train, val = split_rows([(text, to_id[label]) for text, label in rows], val_fraction, seed, whole)
    return LabelledCorpus(train, val, label_names)


def label_ids(labels: Iterable[str], where: str) -> tuple[list[str], dict[str, int]]:
    """(label names in id order, name -> id) of the labels found; fewer than 2 is a ValueError at `where`."""
    names = label_order(set(labels))
    if len(names) < 2:
        raise ValueError(f"{where} has a single label {names}; need at least 2 classes")
    return names, {name: i for i, name in enumerate(names)}


def label_order(labels: set[str]) -> list[str]:
    """Label names in id order: numeric labels numerically ("2" before "10"), then the others by text."""
    numeric = {s: int(s) for s in labels if s.lstrip("-").isdigit()}
    return sorted(labels, key=lambda s: (s not in numeric, numeric.get(s, 0), s))
