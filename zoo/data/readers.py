"""Readers for user data: plain text files/globs, TSV or JSONL pairs, labelled JSONL.

Every reader validates while it reads and raises one clear error naming the file and the line
number (or byte offset for bad UTF-8 / binary content). Nothing is skipped silently except
blank lines in line-oriented formats.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PathLike = str | os.PathLike


def expand_files(files: PathLike | Sequence[PathLike], key: str = "data.files") -> list[Path]:
    """Expand a path, a glob or a list of them into a sorted, de-duplicated list of files."""
    patterns = [files] if isinstance(files, (str, os.PathLike)) else list(files)
    if not patterns:
        raise ValueError(f"{key} is empty; give a file, a list of files or a glob")
    out: list[Path] = []
    for pattern in patterns:
        pattern = os.path.expanduser(str(pattern))
        if glob.has_magic(pattern):
            matches = sorted(glob.glob(pattern, recursive=True))
            matches = [m for m in matches if os.path.isfile(m)]
            if not matches:
                raise FileNotFoundError(f"{key}: glob {pattern!r} matched no files")
            out.extend(Path(m) for m in matches)
        elif os.path.isdir(pattern):
            raise ValueError(
                f"{key}: {pattern!r} is a directory; give files or a glob like '{pattern}/*.txt'"
            )
        elif not os.path.isfile(pattern):
            raise FileNotFoundError(f"{key}: file not found: {pattern}")
        else:
            out.append(Path(pattern))
    return list(dict.fromkeys(out))


def read_utf8(path: PathLike) -> str:
    """Read a whole file as strict UTF-8; binary (NUL bytes) or invalid UTF-8 names the byte offset."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    data = path.read_bytes()
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ValueError(f"{path}: looks binary (NUL byte at byte offset {nul}); expected UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{path}: not valid UTF-8 at byte offset {e.start} ({data[e.start : e.start + 4]!r}): {e.reason}"
        ) from None
    return text.removeprefix("\ufeff")


def read_texts(files: PathLike | Sequence[PathLike], key: str = "data.files") -> list[tuple[Path, str]]:
    """All files as ``(path, text)``; raises if the whole corpus is empty or whitespace-only."""
    paths = expand_files(files, key)
    out = [(p, read_utf8(p)) for p in paths]
    if not any(text.strip() for _, text in out):
        names = ", ".join(str(p) for p in paths[:5]) + (" ..." if len(paths) > 5 else "")
        raise ValueError(f"{key}: corpus is empty or whitespace-only ({names})")
    return out


def _lines(path: Path) -> list[tuple[int, str]]:
    """Non-blank lines with 1-based line numbers."""
    text = read_utf8(path)
    return [(i, line) for i, line in enumerate(text.splitlines(), start=1) if line.strip()]


def _nonempty(path: Path, lineno: int, field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{path}:{lineno}: field {field!r} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{path}:{lineno}: field {field!r} is empty")
    return value


def read_tsv_pairs(path: PathLike) -> list[tuple[str, str]]:
    """``src<TAB>tgt`` per line; a line without a tab (or with empty sides) names its line number."""
    path = Path(path)
    pairs = []
    for lineno, line in _lines(path):
        if "\t" not in line:
            raise ValueError(f"{path}:{lineno}: expected 'src<TAB>tgt', found no tab")
        src, tgt = line.split("\t", 1)
        pairs.append((_nonempty(path, lineno, "src", src), _nonempty(path, lineno, "tgt", tgt)))
    return _require_rows(path, pairs)


def jsonl_values(path: PathLike, key: str = "data.path") -> list[tuple[str, Any]]:
    """Each non-blank line of a JSONL file as (`path:line`, its JSON value), read as strict UTF-8; a missing
    file names `key`, a line that is not JSON names its place."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{key}={str(path)!r}: no such file")
    out = []
    for lineno, line in _lines(path):
        try:
            out.append((f"{path}:{lineno}", json.loads(line)))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{lineno}: not JSON: {e.msg}") from None
    return out


def _jsonl_records(path: Path, fields: Sequence[str]) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for lineno, line in _lines(path):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{lineno}: invalid JSON: {e.msg}") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        missing = [f for f in fields if f not in record]
        if missing:
            raise ValueError(f"{path}:{lineno}: missing field(s) {missing}; found {sorted(record)}")
        out.append((lineno, record))
    return out


def read_jsonl_pairs(path: PathLike, src_field: str = "src", tgt_field: str = "tgt") -> list[tuple[str, str]]:
    """``{"src": .., "tgt": ..}`` per line (field names configurable)."""
    path = Path(path)
    pairs = [
        (_nonempty(path, n, src_field, r[src_field]), _nonempty(path, n, tgt_field, r[tgt_field]))
        for n, r in _jsonl_records(path, (src_field, tgt_field))
    ]
    return _require_rows(path, pairs)


PAIR_FORMATS = {"tsv": lambda path, *fields: read_tsv_pairs(path), "jsonl": read_jsonl_pairs}
PAIR_SUFFIXES = {".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}


def read_pairs(
    path: PathLike, fmt: str = "auto", src_field: str = "src", tgt_field: str = "tgt"
) -> list[tuple[str, str]]:
    """Read parallel pairs; ``fmt='auto'`` picks the format from the file suffix."""
    path = Path(path)
    if fmt == "auto":
        fmt = PAIR_SUFFIXES.get(path.suffix.lower(), "")
        if not fmt:
            raise ValueError(
                f"data.format=auto cannot tell the format of {path}; set data.format to one of "
                f"{sorted(PAIR_FORMATS)}"
            )
    if fmt not in PAIR_FORMATS:
        raise ValueError(f"data.format={fmt!r} is unknown; allowed: {['auto', *sorted(PAIR_FORMATS)]}")
    return PAIR_FORMATS[fmt](path, src_field, tgt_field)


def read_labelled(
    path: PathLike, text_field: str = "text", label_field: str = "label"
) -> list[tuple[str, str]]:
    """``{"text": .., "label": ..}`` per line; labels (str/int/bool) are returned as strings."""
    path = Path(path)
    rows = []
    for n, r in _jsonl_records(path, (text_field, label_field)):
        label = r[label_field]
        if not isinstance(label, (str, int)) or (isinstance(label, str) and not label.strip()):
            raise ValueError(
                f"{path}:{n}: field {label_field!r} must be a non-empty string or an int, got {label!r}"
            )
        rows.append((_nonempty(path, n, text_field, r[text_field]), str(label)))
    return _require_rows(path, rows)


def _require_rows(path: Path, rows: list) -> list:
    if not rows:
        raise ValueError(f"{path}: no examples (file is empty or whitespace-only)")
    return rows
