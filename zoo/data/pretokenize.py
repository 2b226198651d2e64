"""Streaming pre-tokenisation: documents -> token ids on disk, with memory that does not grow with the corpus.

Text arrives in blocks (``Documents.blocks``) and is cut into bounded pieces, each inside a window of context
(zoo.tokenizers.tiling), so that a document's ids equal one tokenizer call on the whole document. Windows are
encoded a batch at a time with the ``tokenizers`` library's multi-threaded ``encode_batch`` while the next
batch is read (the library releases the GIL), and each piece keeps the tokens that start in it (``Tiler``,
which checks every cut). Ids are appended straight to ``<name>.ids.bin`` (uint16/uint32 by vocabulary size)
and document ends to ``<name>.offsets.bin``: the ``RaggedIds`` layout of a cache entry; on request, the UTF-8
bytes of source text each token spells go to ``<name>.bytes.bin`` (uint32, one per token: what bits per byte
divides by, ``<unk>`` included). The files are written inside the entry's temporary folder, so an interrupted
run leaves nothing a later run trusts (``CacheEntry.publish``). The text is hashed as it is encoded: given the
fingerprint the cache key was made from, a corpus that changed in between is refused instead of cached under
the old content's key.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from zoo.data.cache import RaggedIds, id_dtype
from zoo.data.documents import ContentHash, Documents
from zoo.tokenizers.tiling import CUTS, Cuts, Tiler, Tokens, Window, encode_texts, windows
from zoo.tokenizers.tokenizer import ZooTokenizer

BATCH_CHARS = 4 << 20  # characters of text per encode_batch call (~4 MB: memory stays at a few batches)
END = None  # marks the end of a document in the window stream
log = logging.getLogger(__name__)


def encode_documents(tokenizer: ZooTokenizer, docs: list[str], *, append_eos: bool) -> RaggedIds:
    """Documents held in memory as ragged rows, each equal to one tokenizer call on the document (long ones in
    bounded windows, zoo.tokenizers.tiling); ``append_eos`` frames each as one document of a stream (zoo,
    GPT-2: ``doc <eos>``; BERT: ``[CLS] doc [SEP]``: ``tokenizer.specials.document_ends``)."""
    rows = encode_texts(tokenizer.hf, docs)
    if append_eos:
        before, after = tokenizer.specials.document_ends()
        rows = [[*before, *row, *after] for row in rows]
    return RaggedIds.from_rows(rows, id_dtype(tokenizer.vocab_size))


def batches(docs: Documents, batch_chars: int = BATCH_CHARS, content: ContentHash | None = None,
            cuts: Cuts = CUTS) -> Iterator[list[Window | None]]:
    """The windows of every document with ``END`` after each document, grouped into ~``batch_chars`` batches;
    ``content`` hashes the text as it is read."""
    batch: list[Window | None] = []
    size = 0
    for doc in docs.blocks():
        for window in windows(content.through(doc) if content is not None else doc, cuts):
            batch.append(window)
            size += len(window.text)
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
            import rich.progress as rp

            self.bar = rp.Progress(rp.TextColumn("{task.description}"), rp.BarColumn(), rp.DownloadColumn(),
                                   rp.TransferSpeedColumn(), rp.TimeRemainingColumn(), transient=True)
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


class RaggedWriter:
    """Appends documents' ids to ``<name>.ids.bin`` and their end offsets to ``<name>.offsets.bin`` (and with
    ``count_bytes`` each token's source bytes to ``<name>.bytes.bin``); ``tiler`` turns encoded windows into
    the tokens each piece keeps."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype,
                 frame: tuple[Sequence[int], Sequence[int]], tiler: Tiler, count_bytes: bool = False) -> None:
        """``frame``: the ids written before and after each document (``specials.document_ends()``)."""
        self.ids = open(directory / f"{name}.ids.bin", "wb")  # noqa: SIM115  (closed by close())
        self.offsets = open(directory / f"{name}.offsets.bin", "wb")  # noqa: SIM115
        self.offsets.write(np.zeros(1, dtype=np.int64).tobytes())
        counts = directory / f"{bytes_name(name)}.bin"
        self.counts = open(counts, "w+b") if count_bytes else None  # noqa: SIM115
        self.dtype, (self.before, self.after), self.tiler = dtype, frame, tiler
        self.n_tokens, self.in_document = 0, False
        self.carry = 0  # source bytes read but not yet spelled by a token (given to the next one)
        self.read = self.reached = 0  # UTF-8 bytes of the open document read so far / spelled by its tokens

    def _carried(self, counts: np.ndarray) -> np.ndarray:
        """``counts`` with the carried bytes added to the first token."""
        if len(counts):
            counts[0] += self.carry
            self.carry = 0
        return counts

    def _spelled(self, tokens: Tokens) -> tuple[np.ndarray, int]:
        """(kept tokens' source bytes, the piece's bytes): each token spells the document's bytes from the
        furthest any token before it reached to its own end (text a tokenizer drops counts with the token
        after it, a character cut into several byte-level tokens once), wherever the piece boundaries fall."""
        window = tokens.window
        at = np.zeros(len(window.text) - window.lo + 1, dtype=np.int64)  # bytes from the piece's start
        np.cumsum(utf8_sizes(window.text[window.lo :]), out=at[1:])
        ends = np.clip(tokens.kept_ends() - window.lo, 0, len(at) - 1)
        reach = np.maximum.accumulate(np.concatenate(([self.reached], self.read + at[ends])))
        self.reached, self.read = int(reach[-1]), self.read + int(at[window.hi - window.lo])
        return self._carried(np.diff(reach)), int(at[window.hi - window.lo])

    def write(self, batch: list[Window | None], encodings: list) -> int:
        """One encoded batch (``END`` closes a document); returns the UTF-8 bytes of text written."""
        parts: list[np.ndarray] = []
        counts: list[np.ndarray] = []  # (with count_bytes) the source bytes of each token in `parts`
        ends: list[int] = []
        nbytes, position = 0, self.n_tokens

        # frame tokens spell no text of their own, only what was carried
        def frame(ids: Sequence[int]) -> None:
            parts.append(np.asarray(ids, dtype=self.dtype))
            if self.counts is not None:
                counts.append(self._carried(np.zeros(len(ids), dtype=np.int64)))

        for tokens in self.tiler.feed(batch, encodings):
            if not self.in_document:
                frame(self.before)
                position += len(self.before)
                self.in_document = True
            if tokens is END:
                self.carry += self.read - self.reached  # the text after the document's last token
                self.read = self.reached = 0
                frame(self.after)
                position += len(self.after)
                self.in_document = False
                ends.append(position)
                continue
            parts.append(tokens.kept_ids().astype(self.dtype))
            position += len(parts[-1])
            if self.counts is not None:
                spelled, size = self._spelled(tokens)
                counts.append(spelled)
            else:
                size = len(tokens.window.piece.encode("utf-8"))
            nbytes += size
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
    cuts: Cuts = CUTS,
) -> int:
    """Encode ``docs`` into ``directory/<name>.ids.bin`` + ``<name>.offsets.bin`` (one row per document,
    framed as ``encode_documents`` frames it when ``append_eos``; ``count_bytes``: ``<name>.bytes.bin`` too);
    returns the number of tokens. ``fingerprint``: the ``docs.fingerprint()`` the caller keyed the result on
    (text that hashes otherwise as it is encoded raises ValueError); ``cuts``: zoo.tokenizers.tiling's."""
    hf = tokenizer.hf
    frame = tokenizer.specials.document_ends() if append_eos else ((), ())
    tiler = Tiler(lambda text: hf.encode(text, add_special_tokens=False), cuts)
    writer = RaggedWriter(directory, name, id_dtype(tokenizer.vocab_size), frame, tiler,
                          count_bytes=count_bytes)
    meter = Progress(f"tokenizing {name}", docs.nbytes, enabled=progress)
    content = ContentHash()

    def encode(batch: list[Window | None]):
        return batch, hf.encode_batch([w.text for w in batch if w is not END], add_special_tokens=False)

    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = None
            # read the next batch while the previous one encodes
            for batch in batches(docs, batch_chars, content, cuts):
                submitted = pool.submit(encode, batch)
                if pending is not None:
                    meter.advance(writer.write(*pending.result()))
                pending = submitted
            if pending is not None:
                meter.advance(writer.write(*pending.result()))
    finally:
        writer.close()
        meter.close()
    if tiler.hard_cuts:
        log.warning("%s: %d cut(s) where the windows either side disagreed even as one piece of %s "
                    "characters (a run that long without whitespace or punctuation): each side encoded "
                    "alone, so the ids near such a cut may differ from one call on the whole document", name,
                    tiler.hard_cuts, f"{tiler.cuts.longest:,}")
    if fingerprint is not None and content.hexdigest() != fingerprint:
        raise ValueError(f"{docs.origin} changed while it was being read: the text tokenized for {name} is "
                         "not the text the data cache key was computed from, so nothing was cached; run "
                         "again once the file is no longer being written")
    return writer.n_tokens
