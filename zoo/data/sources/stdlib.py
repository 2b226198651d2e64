"""The built-in LM corpus: the running interpreter's standard-library ``.py`` sources.

Files are taken in sorted relative-path order up to ``max_bytes`` UTF-8 bytes (the last file is cut
at a line boundary; ``None`` = all) and split into train/validation by a stable hash of the relative
path, so a file never straddles splits and its split does not depend on the cap. Test suites and
third-party packages are excluded; non-UTF-8 fixture files and exact duplicates are skipped.
"""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

from zoo.data.documents import TextList, head_lines
from zoo.data.sources.base import TextCorpus, check_fraction, hash_fraction, register_source

EXCLUDED_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path | None = None) -> list[Path]:
    """All standard-library ``.py`` files under ``root`` in deterministic (sorted relative path) order."""
    root = root or stdlib_root()
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS and not d.startswith("."))
        found.extend(Path(dirpath, f) for f in filenames if f.endswith(".py"))
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


@register_source("stdlib_text")
def load_stdlib_text(*, max_bytes: int | None = 4_000_000, val_fraction: float = 0.1) -> TextCorpus:
    """Read stdlib sources up to ``max_bytes`` and split them by file."""
    if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes <= 0):
        raise ValueError(f"data.max_bytes={max_bytes!r} must be a positive int or null (= all files)")
    check_fraction(val_fraction)
    root = stdlib_root()
    train: list[tuple[str, str]] = []
    val: list[tuple[str, str]] = []
    total = 0
    seen: set[str] = set()
    for path in stdlib_files(root):
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if not text.strip() or text in seen:  # identical copies would leak between splits
            continue
        seen.add(text)
        size = len(text.encode("utf-8"))
        full = max_bytes is not None and total + size >= max_bytes
        if full:  # keep the cap exact: the last file is cut at a line boundary
            text = head_lines(text, max_bytes - total)
        rel = path.relative_to(root).as_posix()
        if text:
            (val if hash_fraction(rel) < val_fraction else train).append((rel, text))
        total += len(text.encode("utf-8"))
        if full:
            break
    if not train:
        raise ValueError(f"no standard-library sources found under {root}")
    if not val:  # tiny caps: move the file with the smallest hash so validation is never empty
        rel, text = min(train, key=lambda item: hash_fraction(item[0]))
        train.remove((rel, text))
        val.append((rel, text))
        if not train:
            raise ValueError(f"data.max_bytes={max_bytes} is too small for a train/validation split")
    return TextCorpus(TextList([t for _, t in train]), TextList([t for _, t in val]))
