"""Token classification data: each sentence's words joined by single spaces and tokenized with the run's
tokenizer (so the ids are the ones the joined text gets, byte-level BPE's leading-space tokens included), each
word's tag on its FIRST sub-token and -100 on its other sub-tokens, on the tokenizer's special tokens and on
padding, as transformers' run_ner labels them. A sub-token belongs to the word whose characters it overlaps
(the tokenizer's character offsets); a token that overlaps none (a lone space piece) is -100 too.

Cache arrays per split: ``<split>.ids`` (RaggedIds, the sentence's tokens without specials) and
``<split>.labels`` (int64, one per token of ``<split>.ids``, aligned with its flat ids)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from zoo.data.cache import RaggedIds, id_dtype
from zoo.data.datamodules import LabelledDataModule
from zoo.data.datasets import Example
from zoo.tokenizers.specials import SpecialTokens
from zoo.tokenizers.tokenizer import ZooTokenizer
from zoo.utils import IGNORE_INDEX

IOB2_TAG = re.compile(r"O|[BI]-\S.*")  # "O", or "B-" / "I-" and an entity type
ENCODE_BATCH = 4096  # sentences per encode_batch call


def check_tag(tag: Any, where: str) -> str:
    """`tag` if it is an IOB2 tag ("O", "B-TYPE", "I-TYPE"); else one ValueError naming `where` and the
    tag."""
    if not isinstance(tag, str) or not IOB2_TAG.fullmatch(tag):
        raise ValueError(f"{where}: tag {tag!r} is not an IOB2 tag; allowed: 'O', 'B-<type>', 'I-<type>' "
                         "(e.g. B-PER, I-PER)")
    return tag


def word_spans(words: Sequence[str]) -> list[tuple[int, int]]:
    """Character span [start, end) of each word in `" ".join(words)`."""
    starts = itertools.accumulate((len(word) + 1 for word in words), initial=0)  # one too many: zip drops it
    return [(start, start + len(word)) for start, word in zip(starts, words, strict=False)]


def first_tokens(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]],
                 where: str) -> list[int]:
    """Index of each word's first token: the first token whose character offsets overlap the word's span
    (tokens and words are both in text order). A word no token overlaps, or one whose first token is the
    previous word's too (a tokenizer that merges across spaces), is a ValueError naming it."""
    out: list[int] = []
    t = 0
    for w, (start, end) in enumerate(spans):
        while t < len(offsets) and (offsets[t][1] <= start or offsets[t][1] <= offsets[t][0]):
            t += 1  # ends before the word, or covers no character
        if t == len(offsets) or offsets[t][0] >= end:
            raise ValueError(f"{where}: word {w} encodes to no token of its own; the tokenizer drops it")
        if out and out[-1] == t:
            raise ValueError(f"{where}: words {w - 1} and {w} begin in the same token; this tokenizer merges "
                             "across spaces, so words cannot get a token each")
        out.append(t)
    return out


def align_words(tokenizer: ZooTokenizer, sentences: Sequence[Sequence[str]], tags: Sequence[Sequence[int]],
                origin: str = "data") -> tuple[RaggedIds, np.ndarray]:
    """(token ids of each sentence as RaggedIds, (N_tokens,) int64 labels aligned with their flat ids): the
    tag id of a word on its first token, IGNORE_INDEX elsewhere. `origin` names the split in errors."""
    rows: list[list[int]] = []
    labels: list[np.ndarray] = []
    for batch_start in range(0, len(sentences), ENCODE_BATCH):
        batch = sentences[batch_start:batch_start + ENCODE_BATCH]
        encoded = tokenizer.hf.encode_batch([" ".join(words) for words in batch], add_special_tokens=False)
        for i, (words, enc) in enumerate(zip(batch, encoded, strict=True)):
            index = batch_start + i
            starts = first_tokens(enc.offsets, word_spans(words), f"{origin} example {index}")
            row = np.full(len(enc.ids), IGNORE_INDEX, dtype=np.int64)
            row[starts] = tags[index]
            rows.append(enc.ids)
            labels.append(row)
    flat = np.concatenate(labels) if labels else np.empty(0, dtype=np.int64)
    return RaggedIds.from_rows(rows, id_dtype(tokenizer.vocab_size)), flat


class TaggedDataset(Dataset):
    """Sentences framed by the tokenizer's template (BERT ``[CLS] x [SEP]``; zoo's own tokenizers add
    nothing), cut to ``max_len``; labels -100 on the framing."""

    def __init__(self, ids: RaggedIds, labels: np.ndarray, *, max_len: int, specials: SpecialTokens) -> None:
        if len(labels) != len(ids.ids):
            raise ValueError(f"{len(labels)} labels for {len(ids.ids)} tokens")
        self.ids, self.labels, self.max_len, self.specials = ids, labels, max_len, specials

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> Example:
        framed = self.specials.frame(self.ids[i], self.max_len)  # prefix + body[:room] + suffix
        head, tail = len(self.specials.prefix), len(self.specials.suffix)
        body = self.labels[self.ids.offsets[i]:self.ids.offsets[i + 1]][: len(framed) - head - tail]
        labels = np.concatenate([np.full(head, IGNORE_INDEX), body,
                                 np.full(tail, IGNORE_INDEX)]).astype(np.int64)
        return {"input_ids": torch.from_numpy(framed), "labels": torch.from_numpy(labels)}


class TokenClassificationDataModule(LabelledDataModule):
    """Tagged sentences; ``label_names[i]`` is tag ``i``. A sentence's cut words carry no label."""

    dataset_class = TaggedDataset
