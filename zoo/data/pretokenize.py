"""Streaming pre-tokenisation: documents -> token ids on disk, with memory that does not grow with the corpus.

Text arrives in blocks (``Documents.blocks``), is cut into the same <= CHUNK_CHARS pieces as
``chunk_text`` would cut the whole document, and is encoded a batch at a time with the ``tokenizers``
library's multi-threaded ``encode_batch`` while the next batch is read (the library releases the GIL).
Ids are appended straight to ``<name>.ids.bin`` (uint16/uint32 by vocabulary size) and document ends to
``<name>.offsets.bin``: the ``RaggedIds`` layout of a cache entry. The files are written inside the entry's
temporary folder, so an interrupted run leaves nothing a later run trusts (``CacheEntry.publish``).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from zoo.data.cache import id_dtype
from zoo.data.documents import Documents
from zoo.data.tokenizer import CHUNK_CHARS, ZooTokenizer

BATCH_CHARS = 4 << 20  # characters of text per encode_batch call (~4 MB: memory stays at a few batches)
END = None  # marks the end of a document in the piece stream
log = logging.getLogger(__name__)


def pieces(blocks: Iterable[str], max_chars: int = CHUNK_CHARS) -> Iterator[str]:
    """The pieces ``chunk_text("".join(blocks), max_chars)`` gives, without joining the blocks: a piece is
    cut once more than ``max_chars`` characters follow its start (then ``end < n`` holds either way)."""
    buf = ""
    for block in blocks:
        buf += block
        start = 0
        while len(buf) - start > max_chars:
            end = start + max_chars
            cut = buf.rfind("\n", start, end)
            if cut >= start + max_chars // 2:
                end = cut + 1
            yield buf[start:end]
            start = end
        buf = buf[start:]
    start = 0
    while start < len(buf):  # the last (<= max_chars + a bit) characters: the same rule, now knowing n
        end = min(start + max_chars, len(buf))
        if end < len(buf):
            cut = buf.rfind("\n", start, end)
            if cut >= start + max_chars // 2:
                end = cut + 1
        yield buf[start:end]
        start = end


def batches(docs: Documents, batch_chars: int = BATCH_CHARS) -> Iterator[list[str | None]]:
    """Pieces of every document with ``END`` after each document, grouped into ~``batch_chars`` batches."""
    batch: list[str | None] = []
    size = 0
    for doc in docs.blocks():
        for piece in pieces(doc):
            batch.append(piece)
            size += len(piece)
            if size >= batch_chars:
                yield batch
                batch, size = [], 0
        batch.append(END)
    if batch:
        yield batch


class Progress:
    """MB/s and ETA of a pre-tokenisation: a rich progress bar on a terminal, log lines otherwise."""

    LOG_EVERY_S = 30.0

    def __init__(self, label: str, total_bytes: int | None, enabled: bool = True) -> None:
        self.label, self.total, self.done, self.start = label, total_bytes, 0, time.perf_counter()
        self.last_log = self.start
        self.bar = None
        if enabled and sys.stderr.isatty():
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )
            from rich.progress import Progress as Bar

            self.bar = Bar(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                           TimeRemainingColumn(), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(label, total=total_bytes)

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        now = time.perf_counter()
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)
        elif now - self.last_log >= self.LOG_EVERY_S:
            self.last_log = now
            log.info("%s: %s", self.label, self.status(now))

    def status(self, now: float) -> str:
        rate = self.done / max(now - self.start, 1e-9) / 1e6
        line = f"{self.done / 1e6:,.0f} MB at {rate:.1f} MB/s"
        if self.total:
            eta = (self.total - self.done) / 1e6 / rate if rate > 0 else float("inf")
            line += f", {100 * self.done / self.total:.0f}% (ETA {eta:.0f}s)"
        return line

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        log.info("%s: done, %s", self.label, self.status(time.perf_counter()))


class RaggedWriter:
    """Appends documents' ids to ``<name>.ids.bin`` and their end offsets to ``<name>.offsets.bin``."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype,
                 frame: tuple[Sequence[int], Sequence[int]]) -> None:
        """``frame``: the ids written before and after each document (``specials.document_ends()``)."""
        self.ids = open(directory / f"{name}.ids.bin", "wb")  # noqa: SIM115  (closed by close())
        self.offsets = open(directory / f"{name}.offsets.bin", "wb")  # noqa: SIM115
        self.offsets.write(np.zeros(1, dtype=np.int64).tobytes())
        self.dtype, (self.before, self.after) = dtype, frame
        self.n_tokens, self.in_document = 0, False

    def write(self, batch: list[str | None], encodings: list) -> int:
        """One encoded batch (``END`` closes a document); returns the UTF-8 bytes of text it held."""
        encoded = iter(encodings)
        parts: list[np.ndarray] = []
        ends: list[int] = []
        nbytes, position = 0, self.n_tokens
        for piece in batch:
            if not self.in_document:
                parts.append(np.asarray(self.before, dtype=self.dtype))
                position += len(self.before)
                self.in_document = True
            if piece is END:
                parts.append(np.asarray(self.after, dtype=self.dtype))
                position += len(self.after)
                self.in_document = False
                ends.append(position)
            else:
                ids = np.asarray(next(encoded).ids, dtype=self.dtype)
                parts.append(ids)
                position += len(ids)
                nbytes += len(piece.encode("utf-8"))
        flat = np.concatenate(parts) if parts else np.empty(0, dtype=self.dtype)
        self.ids.write(flat.tobytes())
        self.n_tokens = position
        if ends:
            self.offsets.write(np.asarray(ends, dtype=np.int64).tobytes())
        return nbytes

    def close(self) -> None:
        self.ids.close()
        self.offsets.close()


def pretokenize(
    tokenizer: ZooTokenizer,
    docs: Documents,
    directory: Path,
    name: str,
    *,
    append_eos: bool,
    batch_chars: int = BATCH_CHARS,
    progress: bool = True,
) -> int:
    """Encode ``docs`` into ``directory/<name>.ids.bin`` + ``<name>.offsets.bin`` (one row per document,
    framed as ``encode_documents`` frames it when ``append_eos``); returns the number of tokens. One batch
    is encoded while the next is read and split, so the reader and the tokenizer's threads overlap."""
    hf = tokenizer.hf
    frame = tokenizer.specials.document_ends() if append_eos else ((), ())
    writer = RaggedWriter(directory, name, id_dtype(tokenizer.vocab_size), frame)
    meter = Progress(f"tokenizing {name}", docs.nbytes, enabled=progress)

    def encode(batch: list[str | None]):
        return batch, hf.encode_batch([p for p in batch if p is not END], add_special_tokens=False)

    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = None
            for batch in batches(docs, batch_chars):  # read the next batch while the previous one encodes
                submitted = pool.submit(encode, batch)
                if pending is not None:
                    meter.advance(writer.write(*pending.result()))
                pending = submitted
            if pending is not None:
                meter.advance(writer.write(*pending.result()))
    finally:
        writer.close()
        meter.close()
    return writer.n_tokens
