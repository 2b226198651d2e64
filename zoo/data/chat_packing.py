"""Chat SFT rows packed into windows: documents kept apart (``document_ids``: attention and positions per row,
zoo.modules.mask) and the loss mask carried into ``targets`` (the next token where it is trained, -100
elsewhere and across rows). A row of L tokens gives L - 1 inputs; a row longer than ``max_seq_len + 1``
tokens is cut (``data.truncate=true``, counted and logged) or refused naming its line."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from zoo.data.cache import RaggedIds
from zoo.data.datamodules import ZooDataModule
from zoo.data.datasets import Example
from zoo.tokenizers.tokenizer import ZooTokenizer
from zoo.utils import IGNORE_INDEX

log = logging.getLogger(__name__)


def pack(lengths: np.ndarray, window: int) -> list[list[int]]:
    """Row indices per window, in order: a row goes into the current window while its inputs fit."""
    windows: list[list[int]] = []
    used = window
    for i, n in enumerate(lengths):
        if used + n > window:
            windows.append([])
            used = 0
        windows[-1].append(i)
        used += int(n)
    return windows


class PackedChat(Dataset):
    """Windows of packed rows: ``input_ids``, ``targets`` (already shifted) and ``document_ids``, each (T,)
    with T <= max_seq_len (the collator pads)."""

    def __init__(self, ids: RaggedIds, mask: RaggedIds, lines: np.ndarray, max_seq_len: int, *,
                 truncate: bool, origin: str) -> None:
        keep = np.diff(ids.offsets) - 1  # (N,) inputs per row
        long = np.flatnonzero(keep > max_seq_len)
        if len(long) and not truncate:
            raise ValueError(f"{origin}: line {int(lines[long[0]])} has {int(keep[long[0]]) + 1} tokens, "
                             f"more than model.max_seq_len + 1 = {max_seq_len + 1} ({len(long)} such rows); "
                             "set data.truncate=true to cut them, or raise model.max_seq_len")
        self.cut = len(long)
        self.ids, self.mask, self.max_seq_len = ids, mask, max_seq_len
        self.windows = pack(np.minimum(keep, max_seq_len), max_seq_len)
        trained = np.asarray(mask.ids, dtype=bool)
        self.trained_tokens = int(sum(trained[mask.offsets[i] + 1: mask.offsets[i + 1]].sum()
                                      for i in range(len(ids))))

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, key: int) -> Example:
        inputs, targets, docs = [], [], []
        for doc, row in enumerate(self.windows[key]):
            ids = np.asarray(self.ids[row][: self.max_seq_len + 1], dtype=np.int64)
            trained = np.asarray(self.mask[row][1: self.max_seq_len + 1], dtype=bool)
            inputs.append(ids[:-1])
            targets.append(np.where(trained, ids[1:], IGNORE_INDEX))
            docs.append(np.full(len(ids) - 1, doc, dtype=np.int64))
        return {"input_ids": torch.from_numpy(np.concatenate(inputs)),
                "targets": torch.from_numpy(np.concatenate(targets)),
                "document_ids": torch.from_numpy(np.concatenate(docs))}


class ChatDataModule(ZooDataModule):
    """Packed chat rows (PackedChat) per split, a finite epoch of windows shuffled per (seed, epoch)."""

    packs_documents = True

    def __init__(self, tokenizer: ZooTokenizer, rows: dict[str, tuple[RaggedIds, RaggedIds, np.ndarray]],
                 **kwargs: Any) -> None:
        kwargs.pop("document_mask", None)  # always on: packed rows never see each other
        super().__init__(tokenizer, document_mask=True, **kwargs)
        self.rows = rows
        self.setup("fit")
        self.overlong = {split: d.cut for split, d in self.datasets.items()}
        for split, cut in self.overlong.items():
            if cut:
                log.warning("%s: %d %s rows longer than model.max_seq_len + 1 = %d tokens were cut "
                            "(data.truncate=true)", self.origin, cut, split, self.max_seq_len + 1)

    def setup(self, stage: str | None = None) -> None:
        if not self.datasets:
            self.datasets = {split: PackedChat(*arrays, self.max_seq_len, truncate=self.truncate,
                                               origin=self.origin) for split, arrays in self.rows.items()}

    def test_dataloader(self) -> DataLoader:
        return self._loader("val")
