"""``data=chat``: chat SFT rows from a JSONL file (zoo.data.chat_rows: conversational, prompt-completion or
text, each row by its fields), encoded with the tokenizer's chat template and ``data.loss_mask``'s mask. The
same rows from ``data=hf`` (any file or folder ``datasets`` reads): :func:`hf_chat_corpus`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoo.data.cache import RaggedIds, id_dtype
from zoo.data.chat_masks import LOSS_MASKS, encode_row, mask_for
from zoo.data.chat_rows import ChatRow, read_jsonl, read_row
from zoo.data.documents import Documents, TextList
from zoo.data.sources.base import Encoded, HeldCorpus, register_source, split_rows
from zoo.data.sources.hf import CORPUS_READERS, Split, datasets_module, load_saved, nonempty


@dataclass(frozen=True)
class ChatCorpus(HeldCorpus):
    """Chat rows per split and the loss mask they are encoded with."""

    train: list[ChatRow]
    val: list[ChatRow]
    loss_mask: str = "auto"
    kind = "chat"

    def content(self) -> dict[str, list[str]]:
        return {**{split: [row.content() for row in rows] for split, rows in self.splits().items()},
                "loss_mask": [self.loss_mask]}

    def tokenizer_docs(self) -> Documents:
        """The rows' own text (a tokenizer trained here: a template's markup is the template's)."""
        return TextList([row.content() for row in self.train])

    def encode(self, tokenizer, fingerprints: dict[str, str] | None = None) -> Encoded:
        """``<split>.ids`` and ``<split>.mask`` (1 where the loss is taken) per row; ``<split>.line``: its
        line in the file."""
        arrays: dict = {}
        dtype = id_dtype(tokenizer.vocab_size)
        for split, rows in self.splits().items():
            encoded = [encode_row(tokenizer, row, self.loss_mask) for row in rows]
            arrays[f"{split}.ids"] = RaggedIds.from_rows([ids for ids, _ in encoded], dtype)
            arrays[f"{split}.mask"] = RaggedIds.from_rows([mask for _, mask in encoded], dtype)
            arrays[f"{split}.line"] = np.array([int(row.where.rsplit(":", 1)[1]) for row in rows], np.int64)
        return arrays, None


def _checked_mask(loss_mask: str, rows: list[ChatRow]) -> list[ChatRow]:
    """``rows``, each checked to fit ``loss_mask`` (an unknown name is refused first)."""
    if loss_mask != "auto":
        LOSS_MASKS.get(loss_mask)
    for row in rows:
        mask_for(loss_mask, row)
    return rows


def hf_chat_corpus(train: Split, val: Split, fields: dict[str, str]) -> ChatCorpus:
    """task=sft from ``data=hf``: each row read by its fields as a JSONL line is, named ``<split>:N`` (its
    1-based row); a null field is an absent one (Arrow fills what other rows have)."""
    loss_mask = fields["loss_mask"]
    _checked_mask(loss_mask, [])

    def rows(split: Split) -> list[ChatRow]:
        read = [read_row({k: v for k, v in row.items() if v is not None}, f"{split.origin}:{i + 1}")
                for i, row in split]
        return _checked_mask(loss_mask, nonempty(read, split))

    return ChatCorpus(rows(train), rows(val), loss_mask=loss_mask)


CORPUS_READERS["chat"] = hf_chat_corpus


def read_saved(folder: Path) -> Iterator[ChatRow]:
    """The rows of a ``datasets`` folder (``save_to_disk``; of a DatasetDict, its train split), each named
    ``folder:N`` (its 1-based row); a null field is an absent one (Arrow fills what other rows have)."""
    ds = load_saved(datasets_module(), folder)
    if hasattr(ds, "keys"):
        if "train" not in ds:
            raise ValueError(f"data.path={str(folder)!r}: a dataset of splits {sorted(ds)} has no 'train' "
                             "split (data=chat reads it and holds out data.val_fraction of its rows)")
        ds = ds["train"]
    for n, row in enumerate(ds, 1):
        yield read_row({k: v for k, v in row.items() if v is not None}, f"{folder}:{n}")


@register_source("chat")
def load_chat(*, path: str, loss_mask: str = "auto", val_fraction: float = 0.1, seed: int = 0,
              whole: bool = False) -> ChatCorpus:
    """Chat rows of a JSONL file or a ``datasets`` folder (save_to_disk) with a seeded train/validation split;
    ``loss_mask``: auto (each format's default: assistant_only, completion_only, all) or a LOSS_MASKS name,
    checked against every row first."""
    if loss_mask != "auto":
        LOSS_MASKS.get(loss_mask)
    folder = Path(path).expanduser()
    rows = _checked_mask(loss_mask, list(read_saved(folder) if folder.is_dir() else read_jsonl(path)))
    return ChatCorpus(*split_rows(rows, val_fraction, seed, whole), loss_mask=loss_mask)
