"""Prompts as batches (task=grpo): each batch B prompts, left-padded (`prompt_ids`, `prompt_mask`) with their
row numbers (`index`), whose fields the reward functions read (`PromptDataModule.fields`) and whose kind
(messages or text: `PromptDataModule.conversational`) says where a rollout stops. A training batch is
drawn `repeat` times in a row (the task sets grpo.num_iterations: each generation batch is optimised on that
many times, as trl's sampler repeats it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from zoo.data.batching import EpochSampler
from zoo.data.cache import RaggedIds
from zoo.data.datamodules import ZooDataModule
from zoo.data.prompts import fields_of
from zoo.tokenizers.tokenizer import ZooTokenizer


class PromptRows(Dataset):
    """One split's prompts (token id lists), fields (dicts) and whether each was messages (conversational)."""

    def __init__(self, prompt: RaggedIds, fields: RaggedIds, conversational: np.ndarray) -> None:
        self.prompts = [prompt[i].tolist() for i in range(len(prompt))]
        self.fields = [fields_of(fields[i]) for i in range(len(fields))]
        self.conversational = [bool(c) for c in conversational]

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, i: int) -> tuple[int, list[int]]:
        return i, self.prompts[i]


class PromptCollator:
    """(index, ids) items -> {"prompt_ids", "prompt_mask"} (B, P) left-padded and "index" (B,)."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, items: Sequence[tuple[int, list[int]]]) -> dict[str, torch.Tensor]:
        width = max(len(ids) for _, ids in items)
        out = {"prompt_ids": torch.full((len(items), width), self.pad_id, dtype=torch.long),
               "prompt_mask": torch.zeros(len(items), width, dtype=torch.long),
               "index": torch.tensor([i for i, _ in items], dtype=torch.long)}
        for row, (_, ids) in enumerate(items):
            out["prompt_ids"][row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            out["prompt_mask"][row, width - len(ids):] = 1
        return out


class RepeatedBatches(EpochSampler):
    """Batches of `batch_size` indices in an epoch order keyed by (seed, epoch) (a batch sampler), each
    yielded `repeat` times in a row; a resumed epoch starts after the batches already trained."""

    def __init__(self, n: int, batch_size: int, seed: int, repeat: int, shuffle: bool) -> None:
        super().__init__(seed)
        self.n, self.batch_size, self.repeat, self.shuffle = n, batch_size, repeat, shuffle

    def items(self) -> list[list[int]]:
        order = self.rng().permutation(self.n).tolist() if self.shuffle else list(range(self.n))
        return [order[start:start + self.batch_size] for start in range(0, self.n, self.batch_size)
                for _ in range(self.repeat)]

    def __len__(self) -> int:
        return -(-self.n // self.batch_size) * self.repeat


class PromptDataModule(ZooDataModule):
    """Prompt rows per split; `repeat` (set by the task before the fit) draws each training batch that many
    times in a row."""

    def __init__(self, tokenizer: ZooTokenizer, parts: dict[str, tuple[RaggedIds, RaggedIds, np.ndarray]],
                 **kwargs: Any) -> None:
        kwargs.pop("truncate", None)  # prompts are never cut: one too long is refused (the task)
        super().__init__(tokenizer, **kwargs)
        self.parts, self.repeat = parts, 1
        self.collate = PromptCollator(tokenizer.padding_id)
        self.setup("fit")

    def setup(self, stage: str | None = None) -> None:
        if not self.datasets:
            self.datasets = {split: PromptRows(*parts) for split, parts in self.parts.items()}

    def fields(self, split: str, index: Sequence[int]) -> list[dict[str, Any]]:
        """The fields of rows `index` of `split`."""
        rows = self._dataset(split)
        return [rows.fields[int(i)] for i in index]

    def conversational(self, split: str, index: Sequence[int]) -> list[bool]:
        """Whether rows `index` of `split` were messages (a chat template rendered them)."""
        rows = self._dataset(split)
        return [rows.conversational[int(i)] for i in index]

    def train_dataloader(self) -> DataLoader:
        # batch_size prompts per process: the global batch is shared out by rank (zoo.training.distributed)
        sampler = RepeatedBatches(len(self._dataset("train")), self.batch_size * self._world(), self.seed,
                                  self.repeat, True)
        return self._loader("train", batch_sampler=self._resumed(sampler, per_batch=1))

    def val_dataloader(self) -> DataLoader:
        sampler = RepeatedBatches(len(self._dataset("val")), self.batch_size, self.seed, 1, False)
        return self._loader("val", batch_sampler=sampler)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()
