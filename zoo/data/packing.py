"""Document-aware packing for LM/MLM windows (``data.document_mask=true``).

The token stream holds documents back to back, each closed by its end token (``<eos>``), and a window cuts
across them. With document masking every window also carries ``document_ids`` (T,): the index of the
document each token belongs to, counted from the window's start (a document cut by the window's start is
document 0). The model keeps attention inside each document and restarts positions at each one
(``zoo.modules.mask``), so a packed document is seen as if it ran alone. A causal target that crosses into
the next document (the token after an end token) is ignored: nothing in the current document predicts it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from zoo.data.datasets import Example
from zoo.utils import IGNORE_INDEX


def document_ids(ids: np.ndarray, end_id: int) -> np.ndarray:
    """(T,) document index of each token: it grows by one after each ``end_id`` (an end token belongs to the
    document it closes)."""
    ends = np.asarray(ids) == end_id
    return np.concatenate([[0], np.cumsum(ends[:-1])]).astype(np.int64)


class DocumentWindows(Dataset):
    """The windows of ``windows`` (an ``LMBlocks``) with ``document_ids``; causal ``targets`` at document ends
    (which would predict the next document's first token) set to the ignore index."""

    def __init__(self, windows: Dataset, end_id: int | None) -> None:
        if end_id is None:
            raise ValueError("data.document_mask=true needs a tokenizer with an end-of-document token "
                             "(eos_id) to find where packed documents end")
        self.windows, self.end_id = windows, int(end_id)

    def __len__(self) -> int:
        return len(self.windows)

    def target_span(self, key: int) -> tuple[int, int]:
        """Stream positions of window ``key``'s targets (those ignored here included):
        ``LMBlocks.target_span``."""
        return self.windows.target_span(key)

    def __getitem__(self, key: int) -> Example:
        example = dict(self.windows[key])
        inputs = example["input_ids"]
        example["document_ids"] = torch.from_numpy(document_ids(inputs.numpy(), self.end_id))  # (T,)
        if "targets" in example:
            example["targets"] = example["targets"].masked_fill(inputs == self.end_id, IGNORE_INDEX)
        return example
