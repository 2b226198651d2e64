"""Content-hash cache: atomic writes, hashing helpers and compact token-id storage.

A cache entry is a directory ``<cache_dir>/<key>/`` built in a temporary sibling directory and
moved into place with one ``os.rename``, so readers never see a half-written entry.
Token ids are stored as a flat ``uint16``/``uint32`` memmap plus ``int64`` offsets (ragged rows).
Temporary folders carry their writer's ``<host>-<pid>``, so a later run removes what a killed one left
(never a live writer's); a folder at an entry's place without a complete entry in it is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoo.atomic import atomic_write_bytes

# 2: streamed text fingerprints, tokenizer sample in the key; 3: source bytes per token of the scored text splits
# (`<split>.tokens.bytes`); 4: a long document's ids are one call's (zoo.tokenizers.tiling), a tokenizer read from
# files is keyed by their content, not their path
CACHE_FORMAT_VERSION = 4
CACHE_DIR_ENV = "ZOO_CACHE_DIR"
HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"
# A temp nobody has touched for this long has no live writer, whoever wrote it (its host may be another machine).
STALE_AFTER_S = 3600.0
# A temp of a dead process on this host: stale once idle this long (a guard against pid namespaces sharing a
# host name and a cache).
DEAD_OWNER_GRACE_S = 60.0
# `.<key[:16]>.<host>-<pid>.<random>.tmp` (this version) or `.<key[:16]>.<random>.tmp` (earlier versions).
TEMP_DIR_NAME = re.compile(r"\.[0-9a-f]{16}\.(?:(?P<host>[A-Za-z0-9-]+)-(?P<pid>\d+)\.)?[A-Za-z0-9_]+\.tmp")


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
    """Move a fully written ``tmp_dir`` to ``final_dir`` atomically; if another process won, keep theirs. A
    folder there without a manifest (an interrupted copy, not an entry) is moved aside and replaced."""
    for attempt in range(3):
        try:
            os.rename(tmp_dir, final_dir)
            return
        except OSError:
            if (final_dir / "manifest.json").is_file():
                shutil.rmtree(tmp_dir, ignore_errors=True)
                return
            if attempt == 2:
                raise
            discard(final_dir)


def discard(path: Path) -> None:
    """Remove a broken cache entry: renamed to one of this process's temp names first, so a kill half way
    through leaves a leftover `remove_stale_temps` knows, never half an entry under the entry's name."""
    aside = path.with_name(f".{path.name[:16]}.{owner_tag()}.{secrets.token_hex(4)}.tmp")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # another process discarded it first
    if aside.is_dir():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)


def new_tmp_dir(cache_dir: Path, key: str) -> Path:
    cache_dir.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{key[:16]}.{owner_tag()}.", suffix=".tmp", dir=cache_dir))


def owner_tag() -> str:
    """``<host>-<pid>`` of this process, for temp names."""
    return f"{HOST}-{os.getpid()}"


def remove_stale_temps(cache_dir: Path) -> list[Path]:
    """Delete the temp folders of cache builds that were killed (see `is_stale_temp`); returns them."""
    if not cache_dir.is_dir():
        return []
    now, removed = time.time(), []
    for path in cache_dir.iterdir():
        match = TEMP_DIR_NAME.fullmatch(path.name)
        if match and path.is_dir() and not path.is_symlink() and is_stale_temp(path, match["host"], match["pid"], now):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def is_stale_temp(path: Path, host: str | None, pid: str | None, now: float) -> bool:
    """A live writer's temp is never stale: one of a live process on this host is kept; one of a dead process
    on this host goes after a short idle time; one of another host (or an older, untagged name) after an hour
    without any change under it."""
    idle = now - newest_mtime(path)
    if host == HOST and pid is not None:
        return not pid_alive(int(pid)) and idle > DEAD_OWNER_GRACE_S
    return idle > STALE_AFTER_S


def newest_mtime(path: Path) -> float:
    """The latest modification time of `path` or anything under it (a writer touches the file it writes)."""
    newest = path.lstat().st_mtime
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
            except FileNotFoundError:
                pass
    return newest


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


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
