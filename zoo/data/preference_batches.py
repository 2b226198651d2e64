"""Preference pairs as batches (task=dpo): one example per pair, a batch the B prompt+chosen rows then the B
prompt+rejected rows (zoo.data.preference.collate_pairs). A pair whose prompt + completion is longer than
``max_seq_len`` is cut at the end (``data.truncate=true``, counted and logged, as trl's keep_start) or refused
naming its row; a prompt that leaves no room for a completion token is always refused. With
dpo.reference=precomputed each split's pairs carry the reference's log-probs (``with_reference``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from zoo.data.cache import RaggedIds
from zoo.data.datamodules import ZooDataModule
from zoo.data.preference import EncodedPair, collate_pairs
from zoo.tokenizers.tokenizer import ZooTokenizer

log = logging.getLogger(__name__)


def fit_pair(pair: EncodedPair, max_seq_len: int) -> EncodedPair:
    """`pair` with each completion cut so that prompt + completion holds at most `max_seq_len` tokens."""
    room = max_seq_len - len(pair.prompt)
    return EncodedPair(pair.prompt, pair.chosen[:room], pair.rejected[:room])


class PairCollator:
    """EncodedPairs -> collate_pairs' batch (a class: picklable for data loader workers)."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, pairs: Sequence[EncodedPair]) -> dict:
        return collate_pairs(pairs, self.pad_id)


class PreferencePairs(Dataset):
    """The pairs of one split, each fitted to ``max_seq_len`` (``cut``: how many were)."""

    def __init__(self, parts: tuple[RaggedIds, RaggedIds, RaggedIds], max_seq_len: int, *, truncate: bool,
                 origin: str, split: str) -> None:
        self.pairs, self.cut = [], 0
        self.reference: torch.Tensor | None = None  # (N, 2) reference log-probs (chosen, rejected)
        for i in range(len(parts[0])):
            pair = EncodedPair(*(part[i].tolist() for part in parts))
            longest = len(pair.prompt) + max(len(pair.chosen), len(pair.rejected))
            if longest > max_seq_len:
                where = f"{origin}: {split} pair {i}"
                if len(pair.prompt) >= max_seq_len:
                    raise ValueError(f"{where}: its prompt has {len(pair.prompt)} tokens; model.max_seq_len="
                                     f"{max_seq_len} leaves no room for a completion; raise "
                                     "model.max_seq_len or shorten the prompt")
                if not truncate:
                    raise ValueError(f"{where} has {longest} tokens, more than model.max_seq_len="
                                     f"{max_seq_len}; set data.truncate=true to cut it, or raise "
                                     "model.max_seq_len")
                pair, self.cut = fit_pair(pair, max_seq_len), self.cut + 1
            self.pairs.append(pair)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, key: int) -> EncodedPair:
        if self.reference is None:
            return self.pairs[key]
        chosen, rejected = self.reference[key].tolist()
        return dataclasses.replace(self.pairs[key], ref_chosen=chosen, ref_rejected=rejected)

    def with_reference(self, logps: torch.Tensor) -> None:
        """Carry `logps` (N, 2: each pair's chosen and rejected summed reference log-probs) in every item."""
        if tuple(logps.shape) != (len(self.pairs), 2):
            raise ValueError(f"reference log-probs of shape {tuple(logps.shape)} for {len(self.pairs)} "
                             "pairs: they were computed on other data (resume with the data the run started "
                             "with)")
        self.reference = logps.detach().float().cpu()


class PreferenceDataModule(ZooDataModule):
    """Preference pairs per split, a finite epoch shuffled per (seed, epoch)."""

    def __init__(self, tokenizer: ZooTokenizer, parts: dict[str, tuple[RaggedIds, RaggedIds, RaggedIds]],
                 **kwargs: Any) -> None:
        super().__init__(tokenizer, **kwargs)
        self.parts = parts
        self.collate = PairCollator(tokenizer.padding_id)
        self.setup("fit")
        self.overlong = {split: d.cut for split, d in self.datasets.items()}
        for split, cut in self.overlong.items():
            if cut:
                log.warning("%s: %d %s pairs longer than model.max_seq_len = %d tokens were cut "
                            "(data.truncate=true)", self.origin, cut, split, self.max_seq_len)

    def setup(self, stage: str | None = None) -> None:
        if not self.datasets:
            self.datasets = {split: PreferencePairs(parts, self.max_seq_len, truncate=self.truncate,
                                                    origin=self.origin, split=split)
                             for split, parts in self.parts.items()}

    def test_dataloader(self) -> DataLoader:
        return self._loader("val")
