"""One cache entry: ``<cache_dir>/<key>/`` holding the tokenizer, the token arrays and ``manifest.json``
(written last: it marks the entry complete), published whole or not at all (``CacheEntry.publish``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.atomic import atomic_write_json, discard, publish_folder, remove_tree, staging_folder
from zoo.data.cache import RaggedIds, load_flat
from zoo.tokenizers import ZooTokenizer, load_tokenizer

MANIFEST = "manifest.json"
TOKENIZER_DIR = "tokenizer"
log = logging.getLogger(__name__)


@dataclass
class CacheEntry:
    """A published cache directory: tokenizer, token arrays (name -> RaggedIds or int64 array) and
    manifest."""

    path: Path
    tokenizer: ZooTokenizer
    arrays: dict[str, Any]
    manifest: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> CacheEntry:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        dtype = np.dtype(manifest["dtype"])
        arrays = {name: ARRAY_KINDS[kind](path, name, dtype) for name, kind in manifest["arrays"].items()}
        return cls(path, load_tokenizer(path / TOKENIZER_DIR), arrays, manifest)

    @classmethod
    def find(cls, path: Path) -> CacheEntry | None:
        """The published entry at `path`; None on a miss. An entry that does not load (files missing or cut
        short, e.g. an interrupted copy) is discarded and counts as a miss: the caller rebuilds it."""
        if not is_complete(path):
            return None  # nothing there, or a folder without its manifest (publishing replaces it)
        try:
            return cls.load(path)
        except (FileNotFoundError, ValueError, KeyError) as e:  # not PermissionError: someone else's entry
            log.warning("cache entry %s is incomplete (%s: %s); rebuilding it", path, type(e).__name__, e)
            discard(path)
            return None

    @classmethod
    def publish(
        cls,
        cache_dir: Path,
        key: str,
        tokenizer: ZooTokenizer,
        arrays: dict[str, Any],
        manifest: dict[str, Any],
        stream: Callable[[Path], dict[str, str]] | None = None,
    ) -> CacheEntry:
        """Write the entry in a temporary folder of `cache_dir`, move it to `cache_dir/key` and load it back.
        `stream(folder)`, if given, writes more arrays straight into the temporary folder (pre-tokenised
        shards too large to hold in memory) and returns their kinds (name -> "ragged")."""
        tmp = staging_folder(cache_dir / key)
        try:
            write_entry(tmp, tokenizer, arrays, manifest, stream(tmp) if stream is not None else {})
            publish_folder(tmp, cache_dir / key, keep=is_complete)  # another build's entry: the same content
        finally:
            remove_tree(tmp)
        return cls.load(cache_dir / key)


def is_complete(path: Path) -> bool:
    """Whether `path` holds a whole entry: the manifest is written last."""
    return (path / MANIFEST).is_file()


# manifest kind -> how its files load (entry folder, array name, the token-id dtype)
ARRAY_KINDS: dict[str, Callable[[Path, str, np.dtype], Any]] = {
    "ragged": RaggedIds.load,  # token ids per row: <name>.ids.bin + <name>.offsets.bin
    "int64": lambda path, name, _: np.fromfile(path / f"{name}.bin", dtype=np.int64),  # labels
    "uint32": lambda path, name, _: load_flat(path / f"{name}.bin", np.dtype(np.uint32)),  # counts per token
}


def write_entry(path: Path, tokenizer: ZooTokenizer, arrays: dict[str, Any], manifest: dict[str, Any],
                streamed: dict[str, str]) -> None:
    """The entry's files in `path`: tokenizer, one file (set) per array, then the manifest naming each kind
    (`streamed`: the kinds of arrays a `stream` writer already put in `path`)."""
    tokenizer.save(path / TOKENIZER_DIR)
    kinds = {}
    for name, value in arrays.items():
        if isinstance(value, RaggedIds):
            value.save(path, name)
            kinds[name] = "ragged"
        else:
            (path / f"{name}.bin").write_bytes(np.ascontiguousarray(value, dtype=np.int64).tobytes())
            kinds[name] = "int64"
    atomic_write_json(path / MANIFEST, {**manifest, "arrays": {**kinds, **streamed}})  # last: marks complete
