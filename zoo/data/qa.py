"""Extractive question answering data: (question, context) pairs framed by the tokenizer and cut into strided
windows of the context, each labelled with the answer's first and last token, or position 0 when the answer
is not inside the window (as transformers' run_qa labels them).

Framing (``PairTemplate``): the tokenizer's own pair template when it has one (BERT: ``[CLS] q [SEP] c [SEP]``
with token types 0 / 1; RoBERTa: ``<s> q </s></s> c </s>``); zoo's own tokenizers, which have none, get
``<bos> q <eos> c <eos>``. Position 0 is a special token either way: the "no answer in this window" label.

Cache arrays per split (written by zoo.data.sources.squad): ``question`` and ``context`` token ids
(RaggedIds), ``offsets`` (each context token's character [start, end), flat int64 pairs aligned with the
context ids), ``context_utf8`` (the context's UTF-8 bytes, to cut predicted answers from), ``answers``
(character [start, end) of every gold answer, flat int64 pairs), ``answer_counts`` (answers per example) and
``answer_tokens`` (the first answer's first and last context token, int64 pairs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from zoo.data.collate import PadCollator
from zoo.data.datamodules import ZooDataModule
from zoo.data.datasets import Example
from zoo.tokenizers.tokenizer import ZooTokenizer

DEFAULT_MAX_ANSWER_LEN = 30  # tokens of a predicted answer at most (transformers' run_qa max_answer_length)
ARRAYS = ("question", "context", "offsets", "context_utf8", "answers", "answer_counts", "answer_tokens")
# how a pair is framed: seen once
PAIR_PROBES = (("a", "b"), ("hello", "world"), ("1", "2"), ("<unk>", "<unk>"))


@dataclass(frozen=True)
class PairTemplate:
    """The ids a tokenizer puts before, between and after (question, context), and each position's token
    type (None: all 0, no token_type_ids are passed)."""

    before: tuple[int, ...]
    between: tuple[int, ...]
    after: tuple[int, ...]
    types: tuple[tuple[int, ...], int, tuple[int, ...], int, tuple[int, ...]] | None = None

    @property
    def overhead(self) -> int:
        return len(self.before) + len(self.between) + len(self.after)

    @classmethod
    def of(cls, tokenizer: ZooTokenizer) -> PairTemplate:
        """The template `tokenizer.hf` applies to a pair (probed once), with a leading cls/bos and a closing
        sep/eos supplied where it has none (zoo's own tokenizers: ``<bos> q <eos> c <eos>``)."""
        for probe in PAIR_PROBES:  # two texts that each encode to at least one token
            enc = tokenizer.hf.encode(*probe, add_special_tokens=True)
            firsts = [k for k, s in enumerate(enc.sequence_ids) if s == 0]
            seconds = [k for k, s in enumerate(enc.sequence_ids) if s == 1]
            if firsts and seconds:
                break
        else:
            raise ValueError(f"the tokenizer ({tokenizer!r}) encodes none of {list(PAIR_PROBES)} to tokens; "
                             "cannot tell how it frames a (question, context) pair")
        ids, types = list(enc.ids), list(enc.type_ids)
        cut = (firsts[0], firsts[-1] + 1, seconds[0], seconds[-1] + 1)
        before, between, after = tuple(ids[:cut[0]]), tuple(ids[cut[1]:cut[2]]), tuple(ids[cut[3]:])
        specials = tokenizer.specials
        end = specials["sep"] if specials["sep"] is not None else specials["eos"]
        if not before or not between or not after:  # no pair template: zoo's own layout
            if specials.first_id is None or end is None:
                raise ValueError("question answering needs a cls or bos token to put first and a sep or eos "
                                 f"token to close each part; the tokenizer ({tokenizer!r}) has "
                                 f"{ {r: t for r, t in specials.tokens.items() if t is not None} }")
            return cls((specials.first_id,), (end,), (end,))
        if not any(types):
            return cls(before, between, after)
        parts = (tuple(types[:cut[0]]), types[firsts[0]], tuple(types[cut[1]:cut[2]]), types[seconds[0]],
                 tuple(types[cut[3]:]))
        return cls(before, between, after, parts)

    def frame(self, question: np.ndarray, context: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, int]:
        """(input ids, token types or None, position of the first context token)."""
        ids = np.concatenate([self.before, question, self.between, context, self.after]).astype(np.int64)
        start = len(self.before) + len(question) + len(self.between)
        if self.types is None:
            return ids, None, start
        before, q_type, between, c_type, after = self.types
        types = np.concatenate([before, np.full(len(question), q_type), between,
                                np.full(len(context), c_type), after]).astype(np.int64)
        return ids, types, start


def char_span_tokens(offsets: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """(first, last) token whose character offsets (T, 2) overlap [start, end); None when none does."""
    ends_after = offsets[:, 1] > start
    starts_before = offsets[:, 0] < end
    real = offsets[:, 1] > offsets[:, 0]
    hit = np.flatnonzero(ends_after & starts_before & real)
    return (int(hit[0]), int(hit[-1])) if len(hit) else None


def windows(context_len: int, room: int, stride: int) -> list[tuple[int, int]]:
    """Context token ranges [start, end) of `room` tokens at most, consecutive ones sharing `stride` tokens
    (transformers' doc_stride), covering all `context_len` tokens."""
    if not 0 <= stride < room:
        raise ValueError(f"doc_stride={stride} must be in [0, {room}) (the context tokens a window holds)")
    out, start = [], 0
    while True:
        end = min(start + room, context_len)
        out.append((start, end))
        if end == context_len:
            return out
        start = end - stride


@dataclass(frozen=True)
class Window:
    """One model input: example `example`'s context tokens [start, end)."""

    example: int
    start: int
    end: int


class QAExamples:
    """One split's cached arrays (see the module doc), with each example's pieces by index."""

    def __init__(self, arrays: dict[str, Any]) -> None:
        self.question, self.context = arrays["question"], arrays["context"]
        self._offsets = arrays["offsets"].reshape(-1, 2)  # (total context tokens, 2)
        self._text = arrays["context_utf8"]
        self._answers = arrays["answers"].reshape(-1, 2)
        self._answer_rows = np.concatenate([[0], np.cumsum(arrays["answer_counts"])])
        self.answer_tokens = arrays["answer_tokens"].reshape(-1, 2)  # (N, 2) first answer's tokens

    def __len__(self) -> int:
        return len(self.question)

    def offsets(self, i: int) -> np.ndarray:
        """(T, 2) character [start, end) of each context token of example `i`."""
        return self._offsets[self.context.offsets[i]:self.context.offsets[i + 1]]

    def context_text(self, i: int) -> str:
        return bytes(np.asarray(self._text[i], dtype=np.uint8)).decode("utf-8")

    def answers(self, i: int) -> list[str]:
        """Example `i`'s gold answer texts (cut from its context)."""
        text = self.context_text(i)
        return [text[s:e] for s, e in self._answers[self._answer_rows[i]:self._answer_rows[i + 1]].tolist()]


class QADataset(Dataset):
    """The windows of one split: input_ids (+ token_type_ids), start/end positions and the window's index."""

    def __init__(self, examples: QAExamples, template: PairTemplate, *, max_len: int, doc_stride: int | None,
                 origin: str = "data") -> None:
        self.examples, self.template, self.max_len = examples, template, max_len
        self.windows: list[Window] = []
        self.first_window = [0]  # example i's windows are first_window[i] .. first_window[i + 1] - 1
        for i in range(len(examples)):
            room = max_len - template.overhead - len(examples.question[i])
            if room < 1:
                raise ValueError(f"{origin}: example {i}'s question is {len(examples.question[i])} tokens; "
                                 f"with {template.overhead} special tokens no context fits "
                                 f"model.max_seq_len={max_len}")
            stride = room // 4 if doc_stride is None else doc_stride
            if stride >= room:
                raise ValueError(f"{origin}: data.doc_stride={doc_stride} must be smaller than the {room} "
                                 f"context tokens a window of example {i} holds "
                                 f"(model.max_seq_len={max_len})")
            self.windows += [Window(i, s, e) for s, e in windows(len(examples.context[i]), room, stride)]
            self.first_window.append(len(self.windows))

    def __len__(self) -> int:
        return len(self.windows)

    def frame(self, k: int) -> tuple[np.ndarray, np.ndarray | None, int]:
        """Window `k`'s (input ids, token types or None, position of its first context token)."""
        w = self.windows[k]
        return self.template.frame(self.examples.question[w.example],
                                   self.examples.context[w.example][w.start:w.end])

    def positions(self, k: int) -> tuple[int, int]:
        """(start, end) labels of window `k`: the answer's tokens when all of it is inside, else (0, 0)."""
        w = self.windows[k]
        first, last = self.examples.answer_tokens[w.example].tolist()
        if w.start <= first and last < w.end:
            shift = self.frame(k)[2] - w.start
            return first + shift, last + shift
        return 0, 0

    def __getitem__(self, k: int) -> Example:
        ids, types, _ = self.frame(k)
        start, end = self.positions(k)
        out = {"input_ids": torch.from_numpy(ids), "start_positions": torch.tensor(start),
               "end_positions": torch.tensor(end), "window": torch.tensor(k)}
        if types is not None:
            out["token_type_ids"] = torch.from_numpy(types)
        return out


class PairCollator(PadCollator):
    """PadCollator plus token_type_ids padded with 0 (transformers' pad type) to the batch's length."""

    def __call__(self, examples: Sequence[Example]) -> dict[str, torch.Tensor]:
        batch = super().__call__([{k: v for k, v in ex.items() if k != "token_type_ids"} for ex in examples])
        if "token_type_ids" in examples[0]:
            types = torch.zeros_like(batch["input_ids"])  # (B, T)
            for row, ex in enumerate(examples):
                types[row, : len(ex["token_type_ids"])] = ex["token_type_ids"]
            batch["token_type_ids"] = types
        return batch


class QADataModule(ZooDataModule):
    """Strided windows of (question, context) examples: ``data.doc_stride`` context tokens shared by
    consecutive windows (null: a quarter of a window's context room); ``data.max_answer_len`` tokens at most
    in a predicted answer."""

    def __init__(self, tokenizer: ZooTokenizer, arrays: dict[str, dict[str, Any]], *,
                 doc_stride: int | None = None, max_answer_len: int | None = None, **kwargs: Any) -> None:
        super().__init__(tokenizer, **kwargs)
        if doc_stride is not None and (not isinstance(doc_stride, int) or doc_stride < 0):
            raise ValueError(f"data.doc_stride={doc_stride!r} must be an int >= 0 or null")
        self.max_answer_len = DEFAULT_MAX_ANSWER_LEN if max_answer_len is None else max_answer_len
        if not isinstance(self.max_answer_len, int) or self.max_answer_len < 1:
            raise ValueError(f"data.max_answer_len={max_answer_len!r} must be a positive int or null")
        self.template = PairTemplate.of(tokenizer)
        self.examples = {split: QAExamples(a) for split, a in arrays.items()}
        self.doc_stride = doc_stride
        self.collate = PairCollator(tokenizer.padding_id)
        self.setup("fit")

    def setup(self, stage: str | None = None) -> None:
        self.datasets = {split: QADataset(ex, self.template, max_len=self.max_seq_len,
                                          doc_stride=self.doc_stride, origin=f"{self.origin} ({split})")
                         for split, ex in self.examples.items()}

    def example_sizes(self, split: str) -> tuple[np.ndarray, None]:
        """A window's length (data.max_tokens buckets windows of similar length)."""
        data = self.datasets[split]
        return np.array([len(data.frame(k)[0]) for k in range(len(data))], dtype=np.int64), None
