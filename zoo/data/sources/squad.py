"""SQuAD-style extractive QA examples: ``data=squad`` reads JSONL, one example a line,
``{"question": ..., "context": ..., "answers": {"text": [...], "answer_start": [...]}}`` (the Hugging Face
``squad`` dataset's layout; an ``id`` or ``title`` is ignored); ``data=hf`` reads the same three columns.
Every example needs at least one answer, and each answer must be the context's text at its answer_start:
anything else is one error naming the example and the field."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.data.cache import RaggedIds, id_dtype
from zoo.data.documents import Documents, TextList
from zoo.data.qa import char_span_tokens
from zoo.data.readers import _jsonl_records, _require_rows
from zoo.data.sources.base import Encoded, HeldCorpus, check_not_whole, register_source, split_rows
from zoo.data.sources.hf import CORPUS_READERS, Split, nonempty

FIELDS = ("question", "context", "answers")


@dataclass(frozen=True)
class QAExample:
    question: str
    context: str
    answers: tuple[tuple[int, str], ...]  # (answer_start, text), as given


def check_example(record: dict[str, Any], where: str) -> QAExample:
    """The example in `record`, or one ValueError naming `where` and the field."""
    for field in ("question", "context"):
        value = record.get(field)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{where}: field {field!r} must be a non-blank string, got {value!r:.60}")
    context, answers = record["context"], record.get("answers")
    if not isinstance(answers, dict) or not isinstance(answers.get("text"), list) \
            or not isinstance(answers.get("answer_start"), list):
        raise ValueError(f"{where}: field 'answers' must be {{\"text\": [...], \"answer_start\": [...]}}, "
                         f"got {answers!r:.80}")
    texts, starts = answers["text"], answers["answer_start"]
    if len(texts) != len(starts):
        raise ValueError(f"{where}: answers.text has {len(texts)} answers "
                         f"but answers.answer_start {len(starts)}")
    if not texts:
        raise ValueError(f"{where}: answers.text is empty; every SQuAD v1.1 example has at least one answer")
    out = []
    for k, (text, start) in enumerate(zip(texts, starts, strict=True)):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{where}: answers.text[{k}] must be a non-blank string, got {text!r}")
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"{where}: answers.answer_start[{k}] must be an int >= 0, got {start!r}")
        if start + len(text) > len(context):
            raise ValueError(f"{where}: answers.answer_start[{k}]={start} + "
                             f"len(answers.text[{k}])={len(text)} runs past the end of the context "
                             f"({len(context)} characters)")
        if context[start:start + len(text)] != text:
            raise ValueError(f"{where}: answers.text[{k}]={text!r} is not the context's text at "
                             f"answers.answer_start[{k}]={start} "
                             f"(it reads {context[start:start + len(text)]!r})")
        out.append((start, text))
    return QAExample(record["question"], context, tuple(out))


def trimmed(offsets: list[tuple[int, int]], text: str) -> np.ndarray:
    """(T, 2) token character spans without leading/trailing whitespace (byte-level BPE's 'Ġword' spans its
    space too), so an answer cut from them has none; a whitespace-only token becomes empty."""
    out = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    for row in out:
        s, e = int(row[0]), int(row[1])
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        row[:] = (s, e)
    return out


def encode_split(tokenizer, examples: list[QAExample], origin: str) -> dict[str, Any]:
    """The split's cache arrays (zoo.data.qa's module doc), named without the split prefix."""
    dtype = id_dtype(tokenizer.vocab_size)
    questions = tokenizer.encode_batch([ex.question for ex in examples])
    contexts = tokenizer.hf.encode_batch([ex.context for ex in examples], add_special_tokens=False)
    offsets, answers, tokens = [], [], []
    for i, (ex, enc) in enumerate(zip(examples, contexts, strict=True)):
        spans = trimmed(enc.offsets, ex.context)
        offsets.append(spans)
        answers += [(start, start + len(text)) for start, text in ex.answers]
        start, text = ex.answers[0]
        found = char_span_tokens(spans, start, start + len(text))
        if found is None:
            raise ValueError(f"{origin} example {i}: answers.text[0]={text!r} covers no token of the context "
                             f"(the tokenizer drops those characters)")
        tokens.append(found)
    return {
        "question": RaggedIds.from_rows(questions, dtype),
        "context": RaggedIds.from_rows([enc.ids for enc in contexts], dtype),
        "offsets": np.concatenate(offsets).reshape(-1) if offsets else np.empty(0, dtype=np.int64),
        "context_utf8": RaggedIds.from_rows([list(ex.context.encode("utf-8")) for ex in examples], dtype),
        "answers": np.asarray(answers, dtype=np.int64).reshape(-1),
        "answer_counts": np.array([len(ex.answers) for ex in examples], dtype=np.int64),
        "answer_tokens": np.asarray(tokens, dtype=np.int64).reshape(-1),
    }


@dataclass(frozen=True)
class QACorpus(HeldCorpus):
    """SQuAD-style examples for question_answering."""

    train: list[QAExample]
    val: list[QAExample]
    kind = "qa"

    def content(self) -> dict[str, list[str]]:
        return {split: [json.dumps([ex.question, ex.context, ex.answers], ensure_ascii=False) for ex in rows]
                for split, rows in self.splits().items()}

    def tokenizer_docs(self) -> Documents:
        return TextList([text for ex in self.train for text in (ex.question, ex.context)])

    def encode(self, tokenizer, fingerprints: dict[str, str] | None = None) -> Encoded:
        """Cache arrays ``<split>.<name>``, the names of zoo.data.qa.ARRAYS."""
        return {f"{split}.{name}": value for split, rows in self.splits().items()
                for name, value in encode_split(tokenizer, rows, split).items()}, None


def read_squad(path: str | Path) -> list[QAExample]:
    """SQuAD-style JSONL; a bad example names the file, its line, its index and the field."""
    path = Path(path)
    rows = [check_example(r, f"{path}:{n} (example {i})")
            for i, (n, r) in enumerate(_jsonl_records(path, FIELDS))]
    return _require_rows(path, rows)


@register_source("squad")
def load_squad(*, path: str, val_path: str | None = None, val_fraction: float = 0.1,
               seed: int = 0, whole: bool = False) -> QACorpus:
    """SQuAD-style JSONL; validation is ``val_path`` when given, else a seeded ``val_fraction`` of
    ``path`` (``whole``: every example in both splits)."""
    check_not_whole(whole, "data.val_path", val_path)
    rows = read_squad(path)
    if val_path is not None:
        return QACorpus(rows, read_squad(val_path))
    return QACorpus(*split_rows(rows, val_fraction, seed, whole))


# ------------------------------------------------------------------------------------------ data=hf


def _examples(split: Split) -> list[QAExample]:
    return nonempty([check_example(row, f"row {i} of {split.origin}") for i, row in split], split)


def qa_corpus(train: Split, val: Split, fields: dict[str, str]) -> QACorpus:
    """question_answering: the squad columns question, context and answers, in memory."""
    names = train.columns()
    missing = [column for column in FIELDS if column not in names]
    if missing:
        raise ValueError(f"data=hf: task=question_answering reads the squad columns {list(FIELDS)}; "
                         f"{train.origin} has no {missing}; its columns: {sorted(names)}")
    return QACorpus(_examples(train), _examples(val))


CORPUS_READERS["qa"] = qa_corpus
