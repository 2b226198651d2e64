"""``data=hf``: a Hugging Face ``datasets`` dataset as the data of any task (optional ``datasets`` extra).

``data.path`` is a folder written by ``save_to_disk`` (read with ``load_from_disk``), local data files (json,
jsonl, parquet, arrow, csv, txt; a glob or a list) or, as a last resort, a dataset name that ``load_dataset``
may download. ``data.streaming=true`` reads rows lazily (an ``IterableDataset``), so a dataset far larger
than memory can be pre-tokenised. The task picks the columns: ``text_field`` (lm, mlm), ``src_field`` and
``tgt_field`` (seq2seq), ``text_field`` and ``label_field`` (classification), ``tokens_field`` and
``tags_field`` (token_classification), the squad columns (question_answering), trl's chat rows by their fields
with ``loss_mask`` (sft: zoo.data.sources.chat). Text for lm/mlm is streamed
(``HFColumn``); pairs, labelled, tagged and QA examples are read into memory (readers of the last two:
zoo.data.sources.token_tags and .squad, registered in CORPUS_READERS).
"""

from __future__ import annotations

import glob
import importlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from zoo.data.documents import ContentHash, Documents, FileSpan
from zoo.data.sources.base import (
    LabelledCorpus,
    PairCorpus,
    TextCorpus,
    check_fraction,
    check_not_whole,
    hash_fraction,
    register_source,
)
from zoo.data.sources.user import label_ids

FILE_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".arrow": "arrow", ".csv": "csv",
                ".txt": "text"}
FORMATS = ("auto", "disk", *sorted(set(FILE_FORMATS.values())), "hub")
TEXT_TYPES = ("string", "large_string")
TEXT_BUILDERS = ("json", "csv", "text")  # builders that decode files as UTF-8 text
NO_LABEL = -1  # the ClassLabel value datasets stores for "no label" (e.g. a test split without labels)

log = logging.getLogger(__name__)


def datasets_module():
    try:
        return importlib.import_module("datasets")
    except ImportError:
        raise ValueError("data=hf needs the optional 'datasets' package (pip install 'zoo[hf]' or "
                         "pip install datasets); use data=text for local text files") from None


class Split:
    """Rows of one split: a ``datasets`` split, optionally (``carve``: seed, fraction, held out) only the rows
    a seeded hash holds out for validation or only the others, with the origin for messages."""

    def __init__(self, rows: Any, origin: str, carve: tuple[int, float, bool] | None = None,
                 files: Sequence[str] = ()) -> None:
        self.rows, self.origin, self.carve, self.files = rows, origin, carve, tuple(files)

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        for i, row in self._read():
            if self.carve is None or (hash_fraction(f"{self.carve[0]}:{i}") < self.carve[1]) == self.carve[2]:
                yield i, row

    def _read(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every row with its index; bad UTF-8 in a file is named with its byte offset (a streaming dataset
        decodes its files only now)."""
        try:
            yield from enumerate(self.rows)
        except Exception as e:
            raise_unreadable(self.files, e)
            raise

    @property
    def random_access(self) -> bool:
        return hasattr(self.rows, "__getitem__") and hasattr(self.rows, "__len__")

    def columns(self) -> list[str]:
        """The column names (a streaming dataset that does not declare them: its first row's keys)."""
        names = getattr(self.rows, "column_names", None)
        if names is None:
            first = next((row for _, row in self._read()), None)
            names = list(first) if first is not None else []
        return names

    def check_column(self, column: str, key: str, text: bool) -> None:
        """The column exists (else: the key, its value and the columns there are); a text column holds str."""
        names, features = self.columns(), getattr(self.rows, "features", None)
        if column not in names:
            raise ValueError(f"data.{key}={column!r}: {self.origin} has no "
                             f"such column; its columns: {sorted(names)}")
        dtype = getattr(features.get(column), "dtype", None) if features else None
        if text and dtype is not None and dtype not in TEXT_TYPES:
            raise ValueError(f"data.{key}={column!r}: column {column!r} of {self.origin} holds {dtype}, not "
                             f"text ({'/'.join(TEXT_TYPES)}); name a text column")

    def value(self, i: int, row: dict[str, Any], column: str, key: str) -> str | None:
        """The text of ``row[column]`` (None when missing or blank); a non-string names the row."""
        value = row.get(column)
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError(f"data.{key}={column!r}: row {i} of {self.origin} holds {type(value).__name__} "
                             f"{value!r:.40}, not text; name a text column")
        return value if value.strip() else None


class HFColumn(Documents):
    """The text column of one split as documents (one per row, blank rows left out), read lazily."""

    def __init__(self, split: Split, column: str, key: str) -> None:
        self.split, self.column, self.key = split, column, key
        self.nbytes: int | None = None  # known after the first full pass (fingerprint)

    def texts(self) -> Iterator[tuple[int, str]]:
        for i, row in self.split:
            text = self.split.value(i, row, self.column, self.key)
            if text is not None:
                yield i, text

    def blocks(self) -> Iterator[Iterator[str]]:
        for _, text in self.texts():
            yield iter((text,))

    @property
    def origin(self) -> str:  # type: ignore[override]
        return f"column {self.column!r} of {self.split.origin}"

    def fingerprint(self) -> str:
        """The column's ``ContentHash``, the one pre-tokenisation checks (one pass, which also checks every
        value and counts the bytes)."""
        h, total, rows = ContentHash(), 0, 0
        for _, text in self.texts():
            h.add(text)
            total, rows = total + len(text.encode("utf-8")), rows + 1
        if rows == 0:
            raise ValueError(f"data=hf: {self.split.origin} has no rows with text in column {self.column!r} "
                             f"(data.{self.key}); the split is empty")
        self.nbytes = total
        return h.hexdigest()

    def sample(self, max_bytes: int | None, seed: int) -> list[str]:
        """All rows when they fit; else rows in a seeded random order until ``max_bytes`` (a dataset with
        random access) or the first rows up to ``max_bytes`` (a streaming dataset, which has no random
        access)."""
        if (max_bytes is None or (self.nbytes is not None and self.nbytes <= max_bytes)
                or not self.split.random_access):
            return super().sample(max_bytes, seed)
        import numpy as np

        rows, out, used = self.split.rows, [], 0
        picked = set(i for i, _ in self.split) if self.split.carve else None
        for i in np.random.default_rng(seed).permutation(len(rows)).tolist():
            if picked is not None and i not in picked:
                continue
            text = self.split.value(i, rows[i], self.column, self.key)
            if text is None:
                continue
            size = len(text.encode("utf-8"))
            if used + size > max_bytes:
                continue
            out.append(text)
            used += size
        return out


def _files(path: str | Sequence[str]) -> list[str] | None:
    """Local files named by ``path`` (a file, a glob or a list); None when it names none (a folder or a
    name)."""
    patterns = [path] if isinstance(path, str) else list(path)
    found: list[str] = []
    for pattern in patterns:
        pattern = os.path.expanduser(str(pattern))
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        files = [m for m in matches if os.path.isfile(m)]
        if glob.has_magic(pattern) and not files:
            raise FileNotFoundError(f"data.path: glob {pattern!r} matched no files")
        if not files:
            return None
        found += files
    return found


def _caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def raise_unreadable(files: Sequence[str], error: BaseException) -> None:
    """For a failure of datasets' readers caused by bad UTF-8 (it names neither file nor offset), raise the
    ValueError data=text gives: the file and the byte offset. Returns for any other failure."""
    if not files or not _caused_by(error, UnicodeDecodeError):
        return
    for file in files:
        if FILE_FORMATS.get(Path(file).suffix.lower()) not in TEXT_BUILDERS:
            continue
        try:
            for _ in FileSpan(Path(file), 0, os.path.getsize(file)).text():
                pass
        except ValueError as bad:
            raise ValueError(f"data.path: {bad}; data=hf reads text files as UTF-8 (re-encode it, e.g. "
                             "iconv -f latin1 -t utf-8)") from None


def _blank(file: str) -> bool:
    """Whether ``file`` holds only whitespace (and a byte-order mark); reads up to its first other byte."""
    span = FileSpan(Path(file), 0, os.path.getsize(file))
    return not any(data.strip().removeprefix(b"\xef\xbb\xbf").strip() for _, data in span.raw())


def check_files_have_rows(files: Sequence[str], builder: str) -> None:
    """A text-format file that is empty or whitespace only holds no rows: name it (datasets' own readers fail
    on it with StopIteration, a schema error or 'corresponds to no data')."""
    if builder not in TEXT_BUILDERS:
        return
    empty = [f for f in files if _blank(f)]
    if empty:
        shown = ", ".join(empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
        raise ValueError(f"data.path: {shown} {'is' if len(empty) == 1 else 'are'} empty (no rows); data=hf "
                         f"reads {builder} rows from every file given: remove "
                         f"{'it' if len(empty) == 1 else 'them'} or give files with rows")


def load_saved(datasets: Any, folder: Path) -> Any:
    """``load_from_disk``; a split saved with no rows (which datasets writes but cannot read back: IndexError)
    comes back as an empty split with its features, so whoever uses it says which split is empty."""
    try:
        return datasets.load_from_disk(str(folder))
    except IndexError:
        pass
    if not (folder / "dataset_dict.json").is_file():
        raise ValueError(f"data.path={str(folder)!r}: the dataset saved there has no rows (an empty split)")
    out = {}
    for name in json.loads((folder / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]:
        try:
            out[name] = datasets.Dataset.load_from_disk(str(folder / name))
        except IndexError:
            features = datasets.DatasetInfo.from_directory(str(folder / name)).features
            out[name] = datasets.Dataset.from_dict({k: [] for k in features}, features=features)
    return datasets.DatasetDict(out)


def open_dataset(path: str | Sequence[str], format: str, config: str | None,
                 streaming: bool) -> tuple[Any, str, list[str]]:
    """The dataset (a dict of splits, or one split), a description of where it came from and the local files
    it reads (none for a save_to_disk folder or a hub name)."""
    datasets = datasets_module()
    if format not in FORMATS:
        raise ValueError(f"data.format={format!r} is unknown; allowed: {list(FORMATS)}")
    files = _files(path) if format != "hub" else None
    folder = isinstance(path, str) and Path(path).expanduser().is_dir()
    if format == "disk" or (format == "auto" and folder and files is None):
        if not folder:
            raise FileNotFoundError(f"data.path={path!r}: no such folder "
                                    "(data.format=disk reads a save_to_disk folder)")
        try:
            ds = load_saved(datasets, Path(path).expanduser())
        except FileNotFoundError as e:
            raise ValueError(f"data.path={path!r} is a folder but not one written by save_to_disk ({e}); "
                             "give data files (data.path='folder/*.parquet') or such a folder") from None
        if streaming:
            ds = ({k: v.to_iterable_dataset() for k, v in ds.items()} if hasattr(ds, "keys")
                  else ds.to_iterable_dataset())
        return ds, f"the dataset saved at {path}", []
    if format in ("auto", *FILE_FORMATS.values()) and files is not None:
        builder = format
        if format == "auto":
            kinds = {FILE_FORMATS.get(Path(f).suffix.lower()) for f in files}
            if None in kinds or len(kinds) != 1:
                raise ValueError(f"data.format=auto cannot tell the format of {files[:3]}; set data.format "
                                 f"to one of {sorted(set(FILE_FORMATS.values()))} "
                                 f"(suffixes: {sorted(FILE_FORMATS)})")
            builder = kinds.pop()
        check_files_have_rows(files, builder)
        try:
            ds = datasets.load_dataset(builder, data_files=files, streaming=streaming)
        except Exception as e:
            raise_unreadable(files, e)
            raise
        return ds, f"the {builder} files {files[:3]}{' ...' if len(files) > 3 else ''}", files
    if format != "auto" and format != "hub":
        raise FileNotFoundError(f"data.path={path!r}: no such file(s) for data.format={format}")
    if not isinstance(path, str) or os.path.exists(os.path.expanduser(path)) and not folder:
        raise ValueError(f"data.path={path!r} is neither a save_to_disk "
                         "folder, data files nor a dataset name")
    try:
        ds = datasets.load_dataset(path, config, streaming=streaming)
    except Exception as e:  # datasets raises many types; name what was asked for
        raise ValueError(f"data.path={path!r} (data.config={config!r}): load_dataset failed: {e}") from None
    return ds, f"the dataset {path!r}", []


def splits(ds: Any, origin: str, train_split: str, val_split: str | None, val_fraction: float,
           seed: int, files: Sequence[str] = (), whole: bool = False) -> tuple[Split, Split]:
    """(train, validation): the named splits, or, with ``val_split=null``, ``val_fraction`` of the train
    rows; ``whole``: every row of the train split in both."""
    named = dict(ds.items()) if hasattr(ds, "keys") else {"train": ds}
    for key, name in (("train_split", train_split), ("val_split", val_split)):
        if name is not None and name not in named:
            hint = ("; set data.val_split=null to hold out data.val_fraction of the training rows"
                    if key == "val_split" else "")
            raise ValueError(f"data.{key}={name!r}: {origin} has no such split; its splits: "
                             f"{sorted(named)}{hint}")
    train = named[train_split]
    if val_split is not None:
        return (Split(train, f"split {train_split!r} of {origin}", files=files),
                Split(named[val_split], f"split {val_split!r} of {origin}", files=files))
    check_fraction(val_fraction)
    where = f"split {train_split!r} of {origin}"
    if whole:
        return Split(train, where, files=files), Split(train, where, files=files)
    return (Split(train, where, (seed, val_fraction, False), files),
            Split(train, f"the held-out {val_fraction:.0%} of {where}", (seed, val_fraction, True), files))


def _pairs(split: Split, src_field: str, tgt_field: str) -> list[tuple[str, str]]:
    out = []
    for i, row in split:
        src, tgt = split.value(i, row, src_field, "src_field"), split.value(i, row, tgt_field, "tgt_field")
        if src is None or tgt is None:
            raise ValueError(f"row {i} of {split.origin}: {'src_field' if src is None else 'tgt_field'} "
                             f"{src_field if src is None else tgt_field!r} is empty")
        out.append((src, tgt))
    return nonempty(out, split)


def nonempty(rows: list, split: Split) -> list:
    """The `rows` read from `split`; none is a ValueError naming the empty split."""
    if not rows:
        raise ValueError(f"data=hf: {split.origin} has no rows; the split is empty")
    return rows


def _labelled(split: Split, text_field: str, label_field: str,
              names: Sequence[str] | None) -> list[tuple[str, str]]:
    """(text, label name) rows. With a ClassLabel column (``names``), rows holding NO_LABEL, datasets' "no
    label", have no class to learn or score: they are dropped, and how many is logged."""
    out, unlabelled = [], 0
    for i, row in split:
        text, label = split.value(i, row, text_field, "text_field"), row.get(label_field)
        if names is not None and label == NO_LABEL:
            unlabelled += 1
            continue
        if text is None:
            raise ValueError(f"row {i} of {split.origin}: text_field {text_field!r} is empty")
        if (isinstance(label, bool) or not isinstance(label, (str, int))
                or (isinstance(label, str) and not label.strip())):
            raise ValueError(f"row {i} of {split.origin}: label_field {label_field!r} must be a non-empty "
                             f"string or an int, got {label!r}")
        if names is not None and isinstance(label, int) and not 0 <= label < len(names):
            raise ValueError(f"row {i} of {split.origin}: label_field {label_field!r} holds {label}, outside "
                             f"its ClassLabel names {list(names)} "
                             f"(0..{len(names) - 1}, or {NO_LABEL}: no label)")
        out.append((text, names[label] if names is not None and isinstance(label, int) else str(label)))
    if not out and unlabelled:
        raise ValueError(f"data=hf: {split.origin} has no labelled rows: all {unlabelled} rows hold "
                         f"ClassLabel {NO_LABEL} (no label) in column {label_field!r} (data.label_field), as "
                         "a test split without labels does; name a labelled split")
    if unlabelled:
        log.warning("data=hf: dropped %d of %d rows of %s whose "
                    "data.label_field=%r holds ClassLabel %d (no label)",
                    unlabelled, unlabelled + len(out), split.origin, label_field, NO_LABEL)
    return nonempty(out, split)


def text_corpus(train: Split, val: Split, fields: dict[str, str]) -> TextCorpus:
    """lm/mlm: the text column of each split, streamed."""
    train.check_column(fields["text_field"], "text_field", text=True)
    return TextCorpus(HFColumn(train, fields["text_field"], "text_field"),
                       HFColumn(val, fields["text_field"], "text_field"))


def pair_corpus(train: Split, val: Split, fields: dict[str, str]) -> PairCorpus:
    """seq2seq: (src_field, tgt_field) rows, in memory."""
    for key in ("src_field", "tgt_field"):
        train.check_column(fields[key], key, text=True)
    return PairCorpus(train=_pairs(train, fields["src_field"], fields["tgt_field"]),
                      val=_pairs(val, fields["src_field"], fields["tgt_field"]))


def labelled_corpus(train: Split, val: Split, fields: dict[str, str]) -> LabelledCorpus:
    """classification: (text_field, label_field) rows, in memory; a ClassLabel column gives its names."""
    text_field, label_field = fields["text_field"], fields["label_field"]
    train.check_column(text_field, "text_field", text=True)
    train.check_column(label_field, "label_field", text=False)
    features = getattr(train.rows, "features", None) or {}
    names = getattr(features.get(label_field), "names", None)
    rows = {"train": _labelled(train, text_field, label_field, names),
            "val": _labelled(val, text_field, label_field, names)}
    label_names, to_id = label_ids((label for _, label in rows["train"]),
                                   f"data.label_field={label_field!r}: {train.origin}")
    unseen = sorted({label for _, label in rows["val"]} - set(to_id))
    if unseen:
        raise ValueError(f"data.label_field={label_field!r}: labels {unseen[:5]} of {val.origin} never occur "
                         f"in training; training labels: {label_names}")
    return LabelledCorpus(train=[(t, to_id[y]) for t, y in rows["train"]],
                          val=[(t, to_id[y]) for t, y in rows["val"]], label_names=label_names)


# corpus kind a task needs (Task.corpus_kind) -> how data=hf reads it
CORPUS_READERS: dict[str, Callable[[Split, Split, dict[str, str]], Any]] = {
    "text": text_corpus, "pairs": pair_corpus, "labelled": labelled_corpus,
}


@register_source("hf")
def load_hf(
    *,
    path: str | list[str],
    format: str = "auto",
    config: str | None = None,
    streaming: bool = False,
    train_split: str = "train",
    val_split: str | None = None,
    val_fraction: float = 0.1,
    text_field: str = "text",
    src_field: str = "src",
    tgt_field: str = "tgt",
    label_field: str = "label",
    tokens_field: str = "tokens",
    tags_field: str = "ner_tags",
    loss_mask: str = "auto",
    seed: int = 0,
    kind: str = "text",
    whole: bool = False,
) -> TextCorpus | PairCorpus | LabelledCorpus:
    """A ``datasets`` dataset as the corpus ``kind`` the task needs (text, pairs or labelled); ``whole``:
    every row of ``train_split`` in both splits."""
    if kind not in CORPUS_READERS:
        raise ValueError(f"data=hf cannot give {kind!r} examples; it gives {sorted(CORPUS_READERS)}")
    check_not_whole(whole, "data.val_split", val_split)
    ds, origin, files = open_dataset(path, format, config, streaming)
    train, val = splits(ds, origin, train_split, val_split, val_fraction, seed, files, whole)
    fields = {"text_field": text_field, "src_field": src_field, "tgt_field": tgt_field,
              "label_field": label_field, "tokens_field": tokens_field, "tags_field": tags_field,
              "loss_mask": loss_mask}
    return CORPUS_READERS[kind](train, val, fields)
