"""User data sources: plain text files (LM/MLM), parallel pairs (seq2seq), labelled JSONL."""

from __future__ import annotations

from collections.abc import Sequence

from zoo.data.documents import FileSpans, file_spans
from zoo.data.readers import expand_files, read_labelled, read_pairs
from zoo.data.sources.base import LabelledCorpus, PairCorpus, TextStreams, register_source, split_indices


@register_source("text")
def load_text(*, files: str | Sequence[str], val_fraction: float = 0.1) -> TextStreams:
    """One file, several files or a glob, read lazily (any size): each file's tail (``val_fraction`` of its
    bytes, cut after a newline) becomes validation text. UTF-8 is checked as the text is read."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"data.val_fraction={val_fraction!r} must be in (0, 1)")
    paths = expand_files(files)
    train, val = file_spans(paths, val_fraction)
    if not train:
        names = ", ".join(str(p) for p in paths[:5]) + (" ..." if len(paths) > 5 else "")
        raise ValueError(f"data.files: corpus is empty or whitespace-only ({names})")
    if not val:
        raise ValueError(f"data.files: the validation split (last {val_fraction:.0%} of each file) is empty")
    return TextStreams(FileSpans(tuple(train)), FileSpans(tuple(val)))


@register_source("pairs")
def load_pairs(
    *,
    path: str,
    format: str = "auto",
    src_field: str = "src",
    tgt_field: str = "tgt",
    val_fraction: float = 0.1,
    seed: int = 0,
) -> PairCorpus:
    """TSV (``src<TAB>tgt``) or JSONL pairs with a seeded train/validation split."""
    pairs = read_pairs(path, format, src_field, tgt_field)
    train_idx, val_idx = split_indices(len(pairs), val_fraction, seed)
    return PairCorpus(train=[pairs[i] for i in train_idx], val=[pairs[i] for i in val_idx])


@register_source("classification")
def load_classification(
    *,
    path: str,
    text_field: str = "text",
    label_field: str = "label",
    val_fraction: float = 0.1,
    seed: int = 0,
) -> LabelledCorpus:
    """Labelled JSONL; labels sorted and mapped to ids ``0..K-1``."""
    rows = read_labelled(path, text_field, label_field)
    label_names = label_order({label for _, label in rows})
    if len(label_names) < 2:
        raise ValueError(
            f"{path}: field {label_field!r} has a single label {label_names}; need at least 2 classes"
        )
    to_id = {name: i for i, name in enumerate(label_names)}
    examples = [(text, to_id[label]) for text, label in rows]
    train_idx, val_idx = split_indices(len(examples), val_fraction, seed)
    return LabelledCorpus(
        train=[examples[i] for i in train_idx], val=[examples[i] for i in val_idx], label_names=label_names
    )


def label_order(labels: set[str]) -> list[str]:
    """Label names in id order: numeric labels numerically ("2" before "10"), then the others by text."""
    return sorted(labels, key=lambda s: (not s.lstrip("-").isdigit(), _num(s), s))


def _num(label: str) -> int:
    """Numeric labels sort numerically ("2" before "10"); others sort after them by text."""
    return int(label) if label.lstrip("-").isdigit() else 0
