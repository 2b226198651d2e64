"""Content-hash cache: atomic writes, hashing helpers and compact token-id storage.

A cache entry is a directory ``<cache_dir>/<key>/`` built in a temporary sibling directory and
moved into place with one ``os.rename``, so readers never see a half-written entry.
Token ids are stored as a flat ``uint16``/``uint32`` memmap plus ``int64`` offsets (ragged rows).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoo.atomic import atomic_file

CACHE_FORMAT_VERSION = 1


def stable_hash(*parts: object) -> str:
    """SHA-256 hex digest of JSON-serialisable parts (keys sorted, so dict order does not matter)."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def hash_texts(texts: Iterable[str]) -> str:
    """SHA-256 of a sequence of strings, length-prefixed so boundaries count."""
    h = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and ``os.replace``."""
    with atomic_file(path) as f:
        f.write(data)


def atomic_write_json(path: str | os.PathLike, obj: object) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=2, ensure_ascii=False).encode("utf-8"))


def id_dtype(vocab_size: int) -> np.dtype:
    """Smallest unsigned dtype holding ids below ``vocab_size``."""
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


@dataclass(frozen=True)
class RaggedIds:
    """Rows of token ids: row ``i`` is ``ids[offsets[i]:offsets[i + 1]]``."""

    ids: np.ndarray  # (N,) uint16/uint32, usually a read-only memmap
    offsets: np.ndarray  # (rows + 1,) int64

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]], dtype: np.dtype) -> RaggedIds:
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.empty(int(offsets[-1]), dtype=dtype)
        for i, row in enumerate(rows):
            ids[offsets[i] : offsets[i + 1]] = row
        return cls(ids, offsets)

    def save(self, directory: Path, name: str) -> None:
        """Write ``<name>.ids.bin`` (raw ids) and ``<name>.offsets.bin`` (int64); dtype goes in the manifest."""
        atomic_write_bytes(directory / f"{name}.ids.bin", self.ids.tobytes())
        atomic_write_bytes(directory / f"{name}.offsets.bin", self.offsets.tobytes())

    @classmethod
    def load(cls, directory: Path, name: str, dtype: np.dtype) -> RaggedIds:
        ids_path = directory / f"{name}.ids.bin"
        offsets = np.fromfile(directory / f"{name}.offsets.bin", dtype=np.int64)
        if ids_path.stat().st_size == 0:  # np.memmap refuses empty files
            ids = np.empty(0, dtype=dtype)
        else:
            ids = np.memmap(ids_path, dtype=dtype, mode="r")
        if len(offsets) == 0 or offsets[-1] != len(ids):
            raise ValueError(f"corrupt cache entry {directory}: {name} offsets do not match ids")
        return cls(ids, offsets)


def publish_dir(tmp_dir: Path, final_dir: Path) -> None:
    """Move a fully written ``tmp_dir`` to ``final_dir`` atomically; if another process won, keep theirs."""
    try:
        os.rename(tmp_dir, final_dir)
    except OSError:
        if not (final_dir / "manifest.json").exists():
            raise
        shutil.rmtree(tmp_dir, ignore_errors=True)


def new_tmp_dir(cache_dir: Path, key: str) -> Path:
    cache_dir.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=cache_dir))
