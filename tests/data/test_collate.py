from __future__ import annotations

import torch

from zoo.data.collate import PadCollator


def test_pads_dynamically_with_masks():
    batch = PadCollator(pad_id=0)(
        [
            {
                "input_ids": torch.tensor([5, 6, 7]),
                "decoder_input_ids": torch.tensor([1, 9]),
                "labels": torch.tensor([9, 2]),
            },
            {
                "input_ids": torch.tensor([8]),
                "decoder_input_ids": torch.tensor([1, 9, 9]),
                "labels": torch.tensor([9, 9, 2]),
            },
        ]
    )
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["decoder_input_ids"].tolist() == [[1, 9, 0], [1, 9, 9]]
    assert batch["decoder_attention_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert batch["labels"].tolist() == [[9, 2, -100], [9, 9, 2]]
    assert all(v.dtype == torch.long for v in batch.values())


def test_scalar_labels_are_stacked():
    batch = PadCollator(pad_id=0)(
        [
            {"input_ids": torch.tensor([5]), "labels": torch.tensor(3)},
            {"input_ids": torch.tensor([5, 6]), "labels": torch.tensor(1)},
        ]
    )
    assert batch["labels"].tolist() == [3, 1] and batch["labels"].shape == (2,)
