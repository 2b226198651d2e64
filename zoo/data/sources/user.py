"""User data sources: plain text files (LM/MLM), parallel pairs (seq2seq), labelled JSONL."""

from __future__ import annotations

from collections.abc import Sequence

from zoo.data.readers import read_labelled, read_pairs, read_texts
from zoo.data.sources.base import LabelledCorpus, PairCorpus, TextCorpus, register_source, split_indices


def _split_text(text: str, val_fraction: float) -> tuple[str, str]:
    """First ``1 - val_fraction`` of a file for training, the rest for validation (cut at a newline)."""
    cut = int(len(text) * (1.0 - val_fraction))
    newline = text.rfind("\n", 0, cut)
    if newline > len(text) // 2:
        cut = newline + 1
    return text[:cut], text[cut:]


@register_source("text")
def load_text(*, files: str | Sequence[str], val_fraction: float = 0.1) -> TextCorpus:
    """One file, several files or a glob; each file's tail (``val_fraction``) becomes validation text."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"data.val_fraction={val_fraction!r} must be in (0, 1)")
    train, val = [], []
    for _, text in read_texts(files):
        if not text.strip():
            continue
        head, tail = _split_text(text, val_fraction)
        train.append(head)
        if tail.strip():
            val.append(tail)
    if not val:
        raise ValueError(f"data.files: the validation split (last {val_fraction:.0%} of each file) is empty")
    return TextCorpus(train=train, val=val)


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
    label_names = sorted(
        {label for _, label in rows}, key=lambda s: (not s.lstrip("-").isdigit(), _num(s), s)
    )
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


def _num(label: str) -> int:
    """Numeric labels sort numerically ("2" before "10"); others sort after them by text."""
    return int(label) if label.lstrip("-").isdigit() else 0
