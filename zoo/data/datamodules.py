"""Lightning DataModules, one per task, over a cache entry's token ids.

Batches follow Hugging Face names: ``input_ids``/``attention_mask``/``labels`` (B, T) with
``labels=-100`` where ignored; seq2seq adds ``decoder_input_ids``/``decoder_attention_mask``;
classification ``labels`` are (B,). Causal LM batches carry ``targets`` (B, T) instead of ``labels``: the
next token of each position, already shifted (so ``model(**batch)`` refuses them rather than shift twice).
Usable with ``Trainer.fit`` or by hand:
``dm.setup("fit"); next(iter(dm.train_dataloader()))``.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from zoo.data.cache import RaggedIds
from zoo.data.collate import PadCollator
from zoo.data.datasets import EpochKeySampler, LabelledDataset, LMBlocks, PairDataset
from zoo.data.tokenizer import ZooTokenizer


class ZooDataModule(L.LightningDataModule):
    """Shared loader settings; subclasses fill ``self.datasets`` in ``setup``."""

    def __init__(
        self, tokenizer: ZooTokenizer, *, batch_size: int, max_seq_len: int, seed: int, num_workers: int = 0
    ) -> None:
        super().__init__()
        for key, value in (("batch_size", batch_size), ("max_seq_len", max_seq_len)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{key}={value!r} must be a positive int")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"data.num_workers={num_workers!r} must be an int >= 0")
        self.tokenizer = tokenizer
        self.batch_size, self.max_seq_len, self.seed, self.num_workers = (
            batch_size,
            max_seq_len,
            seed,
            num_workers,
        )
        self.datasets: dict[str, Dataset] = {}
        self.collate = PadCollator(tokenizer.padding_id)  # pad_id, else eos_id (GPT-2 has no pad)

    def _loader(self, split: str, *, sampler: Sampler | None = None, shuffle: bool = False) -> DataLoader:
        if split not in self.datasets:
            self.setup("fit" if split in ("train", "val") else "test")
        if split not in self.datasets:
            raise ValueError(f"this dataset has no {split!r} split; available: {sorted(self.datasets)}")
        generator = torch.Generator().manual_seed(self.seed) if shuffle else None
        return DataLoader(
            self.datasets[split],
            batch_size=self.batch_size,
            shuffle=shuffle,
            sampler=sampler,
            generator=generator,
            collate_fn=self.collate,
            num_workers=self.num_workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def state_dict(self) -> dict[str, Any]:
        # Shuffling is keyed by (seed, epoch), which Lightning restores, so the seed is the state.
        return {"seed": self.seed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.seed = int(state_dict.get("seed", self.seed))


DEFAULT_SHARDS = 8  # data.shards: LM/MLM training-stream parts; ranks of a 1/2/4/8-process run read disjoint ones


class LMDataModule(ZooDataModule):
    """Causal LM: random contiguous windows of the training stream (nanoGPT style); validation uses fixed
    windows whose inputs do not overlap. A window is ``max_seq_len + 1`` tokens: ``input_ids`` its first
    ``max_seq_len``, ``targets`` its last ``max_seq_len`` (already the next tokens: not for ``labels=``,
    which shifts; the lm task computes the loss)."""

    mask_prob: float | None = None

    def __init__(
        self,
        tokenizer: ZooTokenizer,
        streams: dict[str, np.ndarray],
        *,
        blocks_per_epoch: int | None = None,
        shards: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, **kwargs)
        if blocks_per_epoch is not None and (not isinstance(blocks_per_epoch, int) or blocks_per_epoch < 1):
            raise ValueError(f"data.blocks_per_epoch={blocks_per_epoch!r} must be a positive int or null")
        if shards is not None and (not isinstance(shards, int) or shards < 1):
            raise ValueError(f"data.shards={shards!r} must be a positive int or null (= {DEFAULT_SHARDS})")
        self.shards = DEFAULT_SHARDS if shards is None else shards
        self.train_parts = 1  # the training stream's parts (LMBlocks.parts), known after setup
        self.streams, self.blocks_per_epoch = streams, blocks_per_epoch

    def _blocks(self, split: str, random: bool) -> LMBlocks:
        return LMBlocks(
            self.streams[split],
            self.max_seq_len,
            random=random,
            seed=self.seed,
            mask_prob=self.mask_prob,
            mask_id=self.tokenizer.mask_id,
            vocab_size=self.tokenizer.vocab_size,
            special_ids=self.tokenizer.special_ids,
            parts=self.shards if random else 1,
        )

    def setup(self, stage: str | None = None) -> None:
        self.datasets = {"train": self._blocks("train", True), "val": self._blocks("val", False)}
        self.train_parts = self.datasets["train"].parts

    def train_dataloader(self) -> DataLoader:
        if "train" not in self.datasets:
            self.setup("fit")
        n = self.blocks_per_epoch or len(self.datasets["train"])  # default: one stream's worth of tokens
        stride = -(-n // self.train_parts) * self.train_parts  # each epoch's keys start at a multiple of parts
        return self._loader("train", sampler=EpochKeySampler(n, stride=stride))


class MLMDataModule(LMDataModule):
    """Masked LM over the same windows: 15% of tokens picked, 80/10/10 mask/random/keep."""

    def __init__(
        self,
        tokenizer: ZooTokenizer,
        streams: dict[str, np.ndarray],
        *,
        mask_prob: float = 0.15,
        **kwargs: Any,
    ) -> None:
        if not 0.0 < mask_prob < 1.0:
            raise ValueError(f"data.mask_prob={mask_prob!r} must be in (0, 1)")
        super().__init__(tokenizer, streams, **kwargs)
        self.mask_prob = mask_prob


class Seq2SeqDataModule(ZooDataModule):
    """Encoder-decoder pairs with right-shifted decoder inputs; ``test_pairs`` keeps raw test strings."""

    def __init__(
        self,
        tokenizer: ZooTokenizer,
        pairs: dict[str, tuple[RaggedIds, RaggedIds]],
        *,
        test_pairs: list[tuple[str, str]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, **kwargs)
        self.pairs, self.test_pairs = pairs, test_pairs or []

    def setup(self, stage: str | None = None) -> None:
        tok = self.tokenizer
        self.datasets = {
            split: PairDataset(src, tgt, max_len=self.max_seq_len, specials=tok.specials)
            for split, (src, tgt) in self.pairs.items()
            if len(src) > 0
        }

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")


class ClassificationDataModule(ZooDataModule):
    """Labelled text; ``label_names[i]`` is the name of class ``i`` (also saved with the tokenizer)."""

    def __init__(
        self,
        tokenizer: ZooTokenizer,
        examples: dict[str, tuple[RaggedIds, np.ndarray]],
        *,
        label_names: list[str],
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, **kwargs)
        self.examples, self.label_names = examples, label_names

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    def setup(self, stage: str | None = None) -> None:
        self.datasets = {
            split: LabelledDataset(texts, labels, max_len=self.max_seq_len, specials=self.tokenizer.specials)
            for split, (texts, labels) in self.examples.items()
        }
