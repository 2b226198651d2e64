"""Dynamic padding: pad each batch to its longest example and build attention masks."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from zoo.data.datasets import Example
from zoo.utils import IGNORE_INDEX

# key -> (value used for padding, name of the attention mask it drives or None)
PAD_RULES: dict[str, tuple[str, str | None]] = {
    "input_ids": ("pad", "attention_mask"),
    "decoder_input_ids": ("pad", "decoder_attention_mask"),
    "labels": ("ignore", None),
    "targets": ("ignore", None),  # causal LM: the next token of each input position
    "document_ids": ("new_document", None),  # packed documents (zoo.data.packing):
                                             # a row's pads form one more document
}


class PadCollator:
    """Stack a list of examples into a batch dict, right-padding variable-length keys."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, examples: Sequence[Example]) -> dict[str, torch.Tensor]:
        batch: dict[str, torch.Tensor] = {}
        for key in examples[0]:
            values = [ex[key] for ex in examples]
            if values[0].dim() == 0:  # per-example scalars, e.g. class labels (B,)
                batch[key] = torch.stack(values)
                continue
            fill, mask_key = PAD_RULES[key]
            pad_value = self.pad_id if fill == "pad" else IGNORE_INDEX
            lengths = torch.tensor([len(v) for v in values])
            padded = torch.full((len(values), int(lengths.max())), pad_value, dtype=torch.long)  # (B, T)
            for row, v in enumerate(values):
                padded[row, : len(v)] = v
                if fill == "new_document" and len(v):  # ids stay non-decreasing; pads attend only to pads
                    padded[row, len(v):] = int(v.max()) + 1
            batch[key] = padded
            if mask_key is not None:
                batch[mask_key] = (torch.arange(padded.shape[1])[None, :] < lengths[:, None]).long()  # (B, T)
        return batch
