"""Tagged sentences for token classification (NER): ``data=token_tags`` reads JSONL, one sentence a line,
``{"tokens": ["EU", "rejects", ...], "tags": ["B-ORG", "O", ...]}`` (one IOB2 tag per word); ``data=hf``
reads a ``datasets`` column of word lists and one of tags (strings, or ClassLabel ids whose names are used).

Label names are every tag found in the training data, sorted; they are saved with the tokenizer and become
the model's num_labels (and its id2label on export). A validation tag no training sentence has is refused
(the model could never predict it), naming the tag and its file:line or row."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo.data.documents import Documents, TextList
from zoo.data.readers import _jsonl_records, _require_rows
from zoo.data.sources.base import Encoded, HeldCorpus, check_not_whole, register_source, split_rows
from zoo.data.sources.hf import CORPUS_READERS, Split, nonempty
from zoo.data.tagging import align_words, check_tag

Sentence = tuple[list[str], list[str]]  # (words, tags)


@dataclass(frozen=True)
class TaggedCorpus(HeldCorpus):
    """(words, tag ids) sentences; ``label_names[tag_id]`` is the tag's text."""

    train: list[tuple[list[str], list[int]]]
    val: list[tuple[list[str], list[int]]]
    label_names: list[str]
    kind = "tagged"

    @classmethod
    def of(cls, train: list[Sentence], val: list[Sentence]) -> TaggedCorpus:
        """Tags as ids into the sorted tags of both splits."""
        names = sorted({tag for _, tags in (*train, *val) for tag in tags})
        to_id = {name: i for i, name in enumerate(names)}
        return cls(train=[(w, [to_id[t] for t in tags]) for w, tags in train],
                   val=[(w, [to_id[t] for t in tags]) for w, tags in val], label_names=names)

    def content(self) -> dict[str, list[str]]:
        """Each sentence as JSON: word boundaries count (a word with a space inside is not two words)."""
        return {**{split: [json.dumps(row, ensure_ascii=False) for row in rows]
                   for split, rows in self.splits().items()}, "labels": self.label_names}

    def tokenizer_docs(self) -> Documents:
        return TextList([" ".join(words) for words, _ in self.train])

    def encode(self, tokenizer, fingerprints: dict[str, str] | None = None) -> Encoded:
        """Cache arrays: ``<split>.ids`` and ``<split>.labels`` (zoo.data.tagging.align_words)."""
        out: dict[str, Any] = {}
        for split, rows in self.splits().items():
            ids, labels = align_words(tokenizer, [w for w, _ in rows], [t for _, t in rows], origin=split)
            out[f"{split}.ids"], out[f"{split}.labels"] = ids, labels
        return out, None


def check_sentence(words: Any, tags: Any, where: str, fields: tuple[str, str]) -> Sentence:
    """(words, tags) of one sentence, or one ValueError naming `where` and the field."""
    tokens_field, tags_field = fields
    if not isinstance(words, (list, tuple)) or not words:
        raise ValueError(f"{where}: field {tokens_field!r} must be a "
                         f"non-empty list of words, got {words!r:.60}")
    if not isinstance(tags, (list, tuple)) or len(tags) != len(words):
        got = f"{len(tags)} tags" if isinstance(tags, (list, tuple)) else repr(tags)[:60]
        raise ValueError(f"{where}: field {tags_field!r} must hold one "
                         f"tag per word ({len(words)} words), got {got}")
    for k, word in enumerate(words):
        if not isinstance(word, str) or not word.strip():
            raise ValueError(f"{where}: {tokens_field}[{k}] must be a non-blank string, got {word!r}")
    return list(words), [check_tag(tag, f"{where}: {tags_field}[{k}]") for k, tag in enumerate(tags)]


def check_val_tags(train: Sequence[Sentence], val: Sequence[tuple[str, Sentence]], train_origin: str,
                   tags_field: str) -> None:
    """Refuse a validation tag no training sentence has (the model could never predict it; evaluate.py
    refuses the same mismatch): one ValueError naming the tag, where it is (`val`'s (where, sentence)) and
    the training data's labels."""
    known = {tag for _, tags in train for tag in tags}
    for where, (_, tags) in val:
        for k, tag in ((k, tag) for k, tag in enumerate(tags) if tag not in known):
            raise ValueError(f"{where}: {tags_field}[{k}]: tag {tag!r} is in the validation data but not "
                             f"in the training data ({train_origin}), which has labels {sorted(known)}; the "
                             f"model could never predict it. Add training sentences tagged {tag!r}, or drop "
                             "it from the validation data.")


def read_tagged_lines(path: str | Path, tokens_field: str = "tokens", tags_field: str = "tags"
                      ) -> list[tuple[str, Sentence]]:
    """JSONL sentences, each with its `file:line`; a bad line names the file, its line number and field."""
    path = Path(path)
    rows = [(f"{path}:{n}", check_sentence(r[tokens_field], r[tags_field], f"{path}:{n}",
                                          (tokens_field, tags_field)))
            for n, r in _jsonl_records(path, (tokens_field, tags_field))]
    return _require_rows(path, rows)


def read_tagged(path: str | Path, tokens_field: str = "tokens", tags_field: str = "tags") -> list[Sentence]:
    """JSONL sentences; a bad line names the file, its line number and the field."""
    return [sentence for _, sentence in read_tagged_lines(path, tokens_field, tags_field)]


@register_source("token_tags")
def load_token_tags(*, path: str, val_path: str | None = None, tokens_field: str = "tokens",
                    tags_field: str = "tags", val_fraction: float = 0.1, seed: int = 0,
                    whole: bool = False) -> TaggedCorpus:
    """Tagged JSONL; validation is ``val_path`` when given, else a seeded ``val_fraction`` of ``path``
    (``whole``: every sentence in both). A tag found only in validation is refused (`check_val_tags`)."""
    check_not_whole(whole, "data.val_path", val_path)
    rows = read_tagged_lines(path, tokens_field, tags_field)
    if val_path is not None:
        train, val, origin = rows, read_tagged_lines(val_path, tokens_field, tags_field), f"data.path={path}"
    else:
        train, val = split_rows(rows, val_fraction, seed, whole)
        origin = f"the rest of data.path={path} after data.val_fraction={val_fraction}, data.seed={seed}"
    check_val_tags([s for _, s in train], val, origin, tags_field)
    return TaggedCorpus.of([s for _, s in train], [s for _, s in val])


# ------------------------------------------------------------------------------------------ data=hf


def _tag_names(split: Split, column: str) -> Sequence[str] | None:
    """The names of a ``Sequence(ClassLabel)`` tags column (conll2003's ner_tags); None for string tags."""
    feature = (getattr(split.rows, "features", None) or {}).get(column)
    return getattr(getattr(feature, "feature", None), "names", None)


def _sentences(split: Split, fields: dict[str, str], names: Sequence[str] | None
               ) -> list[tuple[str, Sentence]]:
    """Each row's (where, sentence): `where` names the row, the split and the fields."""
    tokens_field, tags_field = fields["tokens_field"], fields["tags_field"]
    out = []
    for i, row in split:
        tags = row.get(tags_field)
        if names is not None and isinstance(tags, (list, tuple)):
            bad = next((t for t in tags if not isinstance(t, int) or not 0 <= t < len(names)), None)
            if bad is not None:
                raise ValueError(f"row {i} of {split.origin}: data.tags_field={tags_field!r} holds {bad!r}, "
                                 f"not a class id of its ClassLabel names {list(names)}")
            tags = [names[t] for t in tags]
        where = (f"row {i} of {split.origin} (data.tokens_field={tokens_field!r}, "
                 f"data.tags_field={tags_field!r})")
        out.append((where, check_sentence(row.get(tokens_field), tags, where, (tokens_field, tags_field))))
    return nonempty(out, split)


def tagged_corpus(train: Split, val: Split, fields: dict[str, str]) -> TaggedCorpus:
    """token_classification: (tokens_field, tags_field) rows, in memory; a tag found only in validation is
    refused (`check_val_tags`)."""
    for key in ("tokens_field", "tags_field"):
        train.check_column(fields[key], key, text=False)
    names = _tag_names(train, fields["tags_field"])
    rows, val_rows = _sentences(train, fields, names), _sentences(val, fields, names)
    check_val_tags([s for _, s in rows], val_rows, train.origin, fields["tags_field"])
    return TaggedCorpus.of([s for _, s in rows], [s for _, s in val_rows])


CORPUS_READERS["tagged"] = tagged_corpus
