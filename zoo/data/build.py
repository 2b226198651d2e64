"""``open_data``: config -> (tokenizer, datamodule), with a content-hash cache.

The cache key hashes the corpus content (every split), the tokenizer config (for a tokenizer read from files,
``tokenizer=file|hf``, the files' bytes in place of their path) and the format version. A hit reuses the saved
tokenizer and the memmapped ids, so nothing is retrained or re-encoded; a miss writes the whole entry in a
temporary directory and publishes it with one rename.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from zoo.atomic import sweep
from zoo.data.cache import (
    CACHE_FORMAT_VERSION,
    ENTRY_NAMES,
    default_cache_dir,  # noqa: F401  (re-exported: zoo.data.build.default_cache_dir)
    id_dtype,
    open_cache_dir,
    stable_hash,
)
from zoo.data.datamodules import ZooDataModule
from zoo.data.documents import Documents
from zoo.data.entry import CacheEntry
from zoo.data.sources import load_source
from zoo.tokenizers import ZooTokenizer, build_tokenizer, tokenizer_files, trains, validate_tokenizer_cfg
from zoo.tokenizers.tokenizer import TOKENIZER_FILE
from zoo.tokenizers.trained import DEFAULT_TRAIN_BYTES
from zoo.utils import plain_dict

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------- tokenizer sample


def sample_key(docs: Documents, tokenizer_cfg: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """What the tokenizer's training text depends on besides the corpus: the seed, when it draws a part."""
    train_bytes = tokenizer_cfg.get("train_bytes", DEFAULT_TRAIN_BYTES)
    whole = (not trains(tokenizer_cfg) or train_bytes is None
             or (docs.nbytes is not None and docs.nbytes <= train_bytes))
    return {"sampled": None if whole else [train_bytes, seed]}


def tokenizer_sample(docs: Documents, tokenizer_cfg: Mapping[str, Any], seed: int) -> list[str]:
    """The text the tokenizer trains on: at most `tokenizer.train_bytes` UTF-8 bytes drawn with `seed`
    (everything when it fits), stated in the log; nothing for a tokenizer that does not train."""
    if not trains(tokenizer_cfg):
        return []
    train_bytes = tokenizer_cfg.get("train_bytes", DEFAULT_TRAIN_BYTES)
    sample = docs.sample(train_bytes, seed)
    used = sum(len(t.encode("utf-8")) for t in sample)
    total = f"{docs.nbytes:,}" if docs.nbytes is not None else "an unknown number of"
    log.info("tokenizer: training on %s of %s training-text bytes (tokenizer.train_bytes=%s, seed %d)",
             f"{used:,}", total, f"{train_bytes:,}" if train_bytes else "null", seed)
    return sample


# ------------------------------------------------------------------------------------------- cache


def _tokenizer_fingerprint(cfg: dict[str, Any]) -> dict[str, Any]:
    """The tokenizer config, where it reads files (``tokenizer=file``, ``tokenizer=hf``) with a hash of each
    in place of their folder: two folders holding the same tokenizer (evaluate.py saves the checkpoint's to a
    new temporary folder each run) share cache entries, a changed file never does."""
    files = tokenizer_files(cfg)
    if not files:
        return cfg
    for target in files:
        if not target.is_file():
            raise FileNotFoundError(f"tokenizer.path: tokenizer file not found: {target}")
    given = Path(cfg["path"])
    digests = {TOKENIZER_FILE if f == given else f.name: hashlib.sha256(f.read_bytes()).hexdigest()
               for f in files}
    return {**{k: v for k, v in cfg.items() if k != "path"}, "sha256": digests}


class CorpusKindError(ValueError):
    """The data gives another kind of examples (`kind`) than its reader takes (zoo.tasks names who fits)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def open_data(
    data_cfg: Mapping[str, Any],
    tokenizer_cfg: Mapping[str, Any],
    *,
    corpus_kind: str,
    check_tokenizer: Callable[[ZooTokenizer], None],
    datamodule: Callable[..., ZooDataModule],
    max_seq_len: int,
    batch_size: int,
    cache_dir: str | os.PathLike | None = None,
    seed: int = 0,
    tokenizer: ZooTokenizer | None = None,
    whole: bool = False,
) -> tuple[ZooTokenizer, ZooDataModule]:
    """Read (or generate) the data, train or reuse the tokenizer, tokenize into the cache and return
    ``(tokenizer, datamodule)``. The data's reader (a task: zoo.tasks.build_data) gives the `corpus_kind` it
    reads (another kind: CorpusKindError), `check_tokenizer` (run before any text is encoded) and
    `datamodule(entry, loader, **common)`; `tokenizer`: the one `tokenizer_cfg` reads, when already built
    (init_from's shipped one); `whole`: every example in each split (load_source). Bad input:
    ValueError/FileNotFoundError, before training."""
    cache_dir = open_cache_dir(cache_dir)
    for leftover in sweep(cache_dir, ENTRY_NAMES, shared=True):
        log.info("removed %s, left by an interrupted cache build", leftover)
    data_cfg, tokenizer_cfg = plain_dict(data_cfg, "data"), plain_dict(tokenizer_cfg, "tokenizer")
    validate_tokenizer_cfg(tokenizer_cfg)
    corpus = load_source(data_cfg, seed, corpus_kind, whole=whole)
    if corpus.kind != corpus_kind:
        raise CorpusKindError(f"data={data_cfg['name']} gives {corpus.kind} examples", corpus.kind)
    tokenizer_docs = corpus.tokenizer_docs()
    fingerprints = corpus.fingerprint()
    key = stable_hash(
        CACHE_FORMAT_VERSION,
        corpus.kind,
        fingerprints,
        _tokenizer_fingerprint(tokenizer_cfg),
        sample_key(tokenizer_docs, tokenizer_cfg, seed),
    )
    entry = CacheEntry.find(cache_dir / key)
    if entry is None:
        if tokenizer is None:
            tokenizer = build_tokenizer(tokenizer_cfg, tokenizer_sample(tokenizer_docs, tokenizer_cfg, seed))
        check_tokenizer(tokenizer)  # e.g. mlm needs a mask token: say so before encoding
        # labels belong to the data: a tokenizer file saved by a classification run must not carry its
        # label names into an LM run
        tokenizer.label_names = getattr(corpus, "label_names", None)
        manifest = {
            "version": CACHE_FORMAT_VERSION,
            "key": key,
            "data": data_cfg,
            "tokenizer": tokenizer_cfg,
            "dtype": id_dtype(tokenizer.vocab_size).name,
            "test_pairs": [list(p) for p in getattr(corpus, "test", [])],
        }
        arrays, stream = corpus.encode(tokenizer, fingerprints)  # before the temp folder: it only sees writes
        entry = CacheEntry.publish(cache_dir, key, tokenizer, arrays, manifest, stream=stream)
    loader = {k: data_cfg.get(k)
              for k in ("blocks_per_epoch", "mask_prob", "shards", "doc_stride", "max_answer_len")}
    common = dict(
        batch_size=batch_size, max_seq_len=max_seq_len, seed=seed, num_workers=data_cfg.get("num_workers", 0),
        max_tokens=data_cfg.get("max_tokens"), truncate=data_cfg.get("truncate", True),
        document_mask=data_cfg.get("document_mask", False),
        origin=" ".join(f"data.{k}={data_cfg[k]}" for k in ("name", "path", "files", "dataset")
                        if data_cfg.get(k)),
    )
    check_tokenizer(entry.tokenizer)
    return entry.tokenizer, datamodule(entry, loader, **common)
