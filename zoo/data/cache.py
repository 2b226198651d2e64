"""Content-hash cache: hashing helpers and compact token-id storage.

A cache entry is a directory ``<cache_dir>/<key>/`` published with zoo.atomic's protocol (built beside,
renamed into place; a later run sweeps what a killed build left, never a live writer's temp).
Token ids are stored as a flat ``uint16``/``uint32`` memmap plus ``int64`` offsets (ragged rows).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoo.atomic import atomic_write_bytes

# 2: streamed text fingerprints, tokenizer sample in the key; 3: source bytes per token of the scored text
# splits (`<split>.tokens.bytes`); 4: a long document's ids are one call's (zoo.tokenizers.tiling), a
# tokenizer read from files is keyed by their content, not their path; 5: cached tokenizers carry their chat
# template (a 4 entry for a folder whose template sits in tokenizer_config.json holds a tokenizer without it)
CACHE_FORMAT_VERSION = 5
CACHE_DIR_ENV = "ZOO_CACHE_DIR"
# Entry names (sha256 hex keys) for `zoo.atomic.sweep` (older versions named temps by the first 16 digits).
ENTRY_NAMES = r"[0-9a-f]{64}|[0-9a-f]{16}"


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
        """Write ``<name>.ids.bin`` (raw ids) and ``<name>.offsets.bin`` (int64); dtype goes in the
        manifest."""
        atomic_write_bytes(directory / f"{name}.ids.bin", self.ids.tobytes())
        atomic_write_bytes(directory / f"{name}.offsets.bin", self.offsets.tobytes())

    @classmethod
    def load(cls, directory: Path, name: str, dtype: np.dtype) -> RaggedIds:
        ids = load_flat(directory / f"{name}.ids.bin", dtype)
        offsets = np.fromfile(directory / f"{name}.offsets.bin", dtype=np.int64)
        if len(offsets) == 0 or offsets[-1] != len(ids):
            raise ValueError(f"corrupt cache entry {directory}: {name} offsets do not match ids")
        return cls(ids, offsets)


def load_flat(path: Path, dtype: np.dtype) -> np.ndarray:
    """A flat array file, memmapped read-only (np.memmap refuses an empty file: an empty array then)."""
    if path.stat().st_size % dtype.itemsize:
        raise ValueError(f"corrupt cache entry {path.parent}: {path.name} is not a whole number of {dtype} "
                         "values")
    return np.memmap(path, dtype=dtype, mode="r") if path.stat().st_size else np.empty(0, dtype=dtype)


def default_cache_dir() -> Path:
    """``$ZOO_CACHE_DIR``, else ``~/.cache/zoo/data``."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "zoo" / "data").expanduser()


def open_cache_dir(cache_dir: str | os.PathLike | None) -> Path:
    """The cache folder (created if missing), checked before any work: one error naming where the path came
    from (``cache_dir=`` or ``ZOO_CACHE_DIR``) when it is a file, cannot be created or is not writable."""
    if cache_dir is not None:
        path, origin = Path(cache_dir).expanduser(), f"cache_dir={cache_dir}"
        fix = "give a folder you can write to (train.py: paths.cache_dir=...)"
    elif os.environ.get(CACHE_DIR_ENV):
        path, origin = default_cache_dir(), f"{CACHE_DIR_ENV}={os.environ[CACHE_DIR_ENV]}"
        fix = f"point {CACHE_DIR_ENV} at a folder you can write to"
    else:
        path, origin = default_cache_dir(), f"the default cache folder {default_cache_dir()}"
        fix = f"set {CACHE_DIR_ENV} to a folder you can write to"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ValueError(f"{origin}: {path} exists and is not a folder; {fix}") from None
    except OSError as e:
        raise ValueError(f"{origin}: cannot create the cache folder {path} ({e.strerror}); {fix}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{origin}: the cache folder {path} is not writable; {fix}")
    return path
