"""``tokenizer=file tokenizer.path=...``: a tokenizer read back, not trained: a ``tokenizer.json`` with zoo's
special ids or a folder written by ``ZooTokenizer.save``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from zoo.tokenizers.registry import register_tokenizer
from zoo.tokenizers.tokenizer import META_FILE, TOKENIZER_FILE, ZooTokenizer, load_tokenizer


def saved_files(path: Path) -> list[Path]:
    """What ``load_tokenizer(path)`` reads that decides the ids: a bare file, or a saved folder's tokenizer
    and its metadata (special-token roles; ``labels.json`` is not: the data's labels replace it)."""
    if not path.is_dir():
        return [path]
    meta = path / META_FILE
    return [path / TOKENIZER_FILE, meta] if meta.is_file() else [path / TOKENIZER_FILE]


@register_tokenizer("file", files=saved_files)
def tokenizer_from_file(texts: Sequence[str], *, path: str) -> ZooTokenizer:
    """A pre-built tokenizer: a ``tokenizer.json`` file or a directory saved by ``ZooTokenizer.save``."""
    del texts  # nothing to train
    return load_tokenizer(path)
