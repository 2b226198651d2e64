"""Streaming pre-tokenisation: documents -> token ids on disk, with memory that does not grow with the corpus.

Text arrives in blocks (``Documents.blocks``), is cut into the same <= CHUNK_CHARS pieces as
``chunk_text`` would cut the whole document, and is encoded a batch at a time with the ``tokenizers``
library's multi-threaded ``encode_batch`` while the next batch is read (the library releases the GIL).
Ids are appended straight to ``<name>.ids.bin`` (uint16/uint32 by vocabulary size) and document ends to
``<name>.offsets.bin``: the ``RaggedIds`` layout of a cache entry; on request, the UTF-8 bytes of source text
each token spells go to ``<name>.bytes.bin`` (uint32, one per token: what bits per byte divides by, ``<unk>``
included). The files are written inside the entry's temporary folder, so an interrupted run leaves nothing a
later run trusts (``CacheEntry.publish``). The text is hashed as it is encoded: given the fingerprint the cache
key was made from, a corpus that changed in between is refused instead of cached under the old content's key.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from zoo.data.cache import id_dtype
from zoo.data.documents import ContentHash, Documents
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


def batches(docs: Documents, batch_chars: int = BATCH_CHARS, content: ContentHash | None = None
            ) -> Iterator[list[str | None]]:
    """Pieces of every document with ``END`` after each document, grouped into ~``batch_chars`` batches;
    ``content`` hashes the text as it is read."""
    batch: list[str | None] = []
    size = 0
    for doc in docs.blocks():
        for piece in pieces(content.through(doc) if content is not None else doc):
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


BYTES_DTYPE = np.dtype(np.uint32)  # <name>.bytes.bin: source bytes per token


def bytes_name(name: str) -> str:
    """The cache array of source bytes per token beside the ids array ``name`` (kind ``uint32``)."""
    return f"{name}.bytes"


def utf8_sizes(text: str) -> np.ndarray:
    """(len(text),) UTF-8 length of each character."""
    points = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    return 1 + (points >= 0x80).astype(np.int64) + (points >= 0x800) + (points >= 0x10000)


def token_bytes(piece: str, offsets: Sequence[tuple[int, int]]) -> tuple[np.ndarray, int]:
    """(n,) UTF-8 bytes of ``piece`` that each of its n tokens spells, from the end of the token before to its
    own end (character ``offsets``), and the bytes after the last token. Text a tokenizer drops (stripped
    whitespace) counts with the token after it; a character cut into several byte-level tokens counts once;
    an unknown character as ``<unk>`` counts its own bytes."""
    at = np.zeros(len(piece) + 1, dtype=np.int64)  # byte offset of each character position
    np.cumsum(utf8_sizes(piece), out=at[1:])
    ends = np.maximum.accumulate(np.fromiter((end for _, end in offsets), dtype=np.int64, count=len(offsets)))
    reached = at[ends]  # (n,) byte offset where each token ends
    return np.diff(reached, prepend=0), int(at[-1] - (reached[-1] if len(reached) else 0))


class RaggedWriter:
    """Appends documents' ids to ``<name>.ids.bin`` and their end offsets to ``<name>.offsets.bin`` (and with
    ``count_bytes`` each token's source bytes to ``<name>.bytes.bin``)."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype,
                 frame: tuple[Sequence[int], Sequence[int]], count_bytes: bool = False) -> None:
        """``frame``: the ids written before and after each document (``specials.document_ends()``)."""
        self.ids = open(directory / f"{name}.ids.bin", "wb")  # noqa: SIM115  (closed by close())
        self.offsets = open(directory / f"{name}.offsets.bin", "wb")  # noqa: SIM115
        self.offsets.write(np.zeros(1, dtype=np.int64).tobytes())
        counts = directory / f"{bytes_name(name)}.bin"
        self.counts = open(counts, "w+b") if count_bytes else None  # noqa: SIM115
        self.dtype, (self.before, self.after) = dtype, frame
        self.n_tokens, self.in_document = 0, False
        self.carry = 0  # source bytes read but not yet spelled by a token (given to the next one)

    def _spelled(self, counts: np.ndarray, rest: int = 0) -> np.ndarray:
        """``counts`` with the carried bytes added to the first token; ``rest`` carried on."""
        if len(counts):
            counts[0] += self.carry
            self.carry = 0
        self.carry += rest
        return counts

    def write(self, batch: list[str | None], encodings: list) -> int:
        """One encoded batch (``END`` closes a document); returns the UTF-8 bytes of text it held."""
        encoded = iter(encodings)
        parts: list[np.ndarray] = []
        counts: list[np.ndarray] = []  # (with count_bytes) the source bytes of each token in `parts`
        ends: list[int] = []
        nbytes, position = 0, self.n_tokens

        def frame(ids: Sequence[int]) -> None:  # frame tokens spell no text of their own, only what was carried
            parts.append(np.asarray(ids, dtype=self.dtype))
            if self.counts is not None:
                counts.append(self._spelled(np.zeros(len(ids), dtype=np.int64)))

        for piece in batch:
            if not self.in_document:
                frame(self.before)
                position += len(self.before)
                self.in_document = True
            if piece is END:
                frame(self.after)
                position += len(self.after)
                self.in_document = False
                ends.append(position)
            else:
                encoding = next(encoded)
                parts.append(np.asarray(encoding.ids, dtype=self.dtype))
                position += len(parts[-1])
                nbytes += len(piece.encode("utf-8"))
                if self.counts is not None:
                    counts.append(self._spelled(*token_bytes(piece, encoding.offsets)))
        flat = np.concatenate(parts) if parts else np.empty(0, dtype=self.dtype)
        self.ids.write(flat.tobytes())
        self.n_tokens = position
        if ends:
            self.offsets.write(np.asarray(ends, dtype=np.int64).tobytes())
        if counts:
            self.counts.write(np.concatenate(counts).astype(BYTES_DTYPE).tobytes())
        return nbytes

    def close(self) -> None:
        """Close the files; bytes read after the stream's last token count with that token."""
        if self.counts is not None:
            if self.carry and self.n_tokens:
                self.counts.seek(-BYTES_DTYPE.itemsize, os.SEEK_END)
                last = np.frombuffer(self.counts.read(BYTES_DTYPE.itemsize), dtype=BYTES_DTYPE) + self.carry
                self.counts.seek(-BYTES_DTYPE.itemsize, os.SEEK_END)
                self.counts.write(last.astype(BYTES_DTYPE).tobytes())
            self.counts.close()
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
    count_bytes: bool = False,
    fingerprint: str | None = None,
) -> int:
    """Encode ``docs`` into ``directory/<name>.ids.bin`` + ``<name>.offsets.bin`` (one row per document,
    framed as ``encode_documents`` frames it when ``append_eos``; ``count_bytes``: ``<name>.bytes.bin`` too);
    returns the number of tokens. One batch is encoded while the next is read and split, so the reader and
    the tokenizer's threads overlap. ``fingerprint``: the ``docs.fingerprint()`` the caller keyed the result
    on; text that hashes otherwise as it is encoded (a file rewritten meanwhile) raises ValueError."""
    hf = tokenizer.hf
    frame = tokenizer.specials.document_ends() if append_eos else ((), ())
    writer = RaggedWriter(directory, name, id_dtype(tokenizer.vocab_size), frame, count_bytes=count_bytes)
    meter = Progress(f"tokenizing {name}", docs.nbytes, enabled=progress)
    content = ContentHash()

    def encode(batch: list[str | None]):
        return batch, hf.encode_batch([p for p in batch if p is not END], add_special_tokens=False)

    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = None
            for batch in batches(docs, batch_chars, content):  # read the next batch while the previous one encodes
                submitted = pool.submit(encode, batch)
                if pending is not None:
                    meter.advance(writer.write(*pending.result()))
                pending = submitted
            if pending is not None:
                meter.advance(writer.write(*pending.result()))
    finally:
        writer.close()
        meter.close()
    if fingerprint is not None and content.hexdigest() != fingerprint:
        raise ValueError(f"{docs.origin} changed while it was being read: the text tokenized for {name} is not the "
                         "text the data cache key was computed from, so nothing was cached; run again once the "
                         "file is no longer being written")
    return writer.n_tokens
