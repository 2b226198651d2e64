"""Documents read lazily: the text of a corpus split as a stream, so that nothing holds a whole corpus.

A ``Documents`` object answers for one split: its documents as streams of text blocks (``blocks``), a
content hash for the cache key (``fingerprint``, one streaming pass), its size in UTF-8 bytes when known
(``nbytes``, for the progress bar's ETA) and a bounded, seeded sample for tokenizer training (``sample``).
``TextList`` wraps strings already in memory; ``FileSpans`` reads byte ranges of files (``data=text``);
``zoo.data.sources.hf`` adds a column of a ``datasets`` dataset.
"""

from __future__ import annotations

import codecs
import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

READ_BYTES = 1 << 20  # file read size while streaming
SAMPLE_BLOCK = 1 << 16  # a tokenizer sample is made of blocks of this many bytes (characters in memory)


class ContentHash:
    """The content hash of documents (``Documents.fingerprint``): SHA-256 over each document's SHA-256, so
    boundaries count. Fed as the text streams by, it hashes exactly the text that another pass
    (pre-tokenisation) reads, which is how a file rewritten between the passes is caught."""

    def __init__(self) -> None:
        self.outer = hashlib.sha256()

    def through(self, blocks: Iterable[str]) -> Iterator[str]:
        """One document's ``blocks``, passed on unchanged and hashed on the way (counted once exhausted)."""
        inner = hashlib.sha256()
        for block in blocks:
            inner.update(block.encode("utf-8"))
            yield block
        self.outer.update(inner.digest())

    def add(self, text: str) -> None:
        """One whole document."""
        for _ in self.through((text,)):
            pass

    def hexdigest(self) -> str:
        return self.outer.hexdigest()


class Documents:
    """One split's documents, streamed. Subclasses implement ``blocks``; the rest has defaults."""

    nbytes: int | None = None  # total UTF-8 bytes when known (progress ETA); None: unknown (streaming)
    origin = "the text"  # where the documents come from, for messages

    def blocks(self) -> Iterator[Iterator[str]]:
        """Each document as an iterator over consecutive pieces of its text."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        """The documents' ``ContentHash`` (one streaming pass)."""
        h = ContentHash()
        for doc in self.blocks():
            for _ in h.through(doc):
                pass
        return h.hexdigest()

    def sample(self, max_bytes: int | None, seed: int) -> list[str]:
        """At most ``max_bytes`` UTF-8 bytes of text for tokenizer training (all of it when it fits or
        ``max_bytes`` is None), chosen by ``seed``. Default: documents in order until the budget is spent."""
        out, used = [], 0
        for doc in self.blocks():
            for block in doc:
                size = len(block.encode("utf-8"))
                if max_bytes is not None and used + size > max_bytes:
                    block = head_lines(block, max_bytes - used)
                    if block:
                        out.append(block)
                    return out
                out.append(block)
                used += size
        return out


def head_lines(text: str, budget: int) -> str:
    """The longest prefix of whole lines of ``text`` within ``budget`` UTF-8 bytes."""
    head = text.encode("utf-8")[: max(0, budget)].decode("utf-8", errors="ignore")
    cut = head.rfind("\n")
    return head[: cut + 1] if cut >= 0 else ""


def choose_blocks(lengths: Sequence[int], block: int, max_bytes: int,
                  seed: int) -> list[tuple[int, int, int]]:
    """A seeded choice of ``(document, start, end)`` blocks (each at most ``block`` long, cut from
    documents of ``lengths``) totalling at most ``max_bytes``, in document order."""
    block = max(1, min(block, max_bytes))  # a budget below one block still gets text
    starts = [(d, s) for d, n in enumerate(lengths) for s in range(0, n, block)]
    order = np.random.default_rng(seed).permutation(len(starts))
    chosen, used = [], 0
    for i in order:
        d, s = starts[int(i)]
        e = min(s + block, lengths[d])
        if used + (e - s) > max_bytes:
            continue
        chosen.append((d, s, e))
        used += e - s
        if max_bytes - used < 1:
            break
    return sorted(chosen)


@dataclass(frozen=True)
class TextList(Documents):
    """Documents already in memory (the built-in sources, pairs and labelled text)."""

    texts: Sequence[str]

    @property
    def nbytes(self) -> int:  # type: ignore[override]
        return sum(len(t.encode("utf-8")) for t in self.texts)

    def blocks(self) -> Iterator[Iterator[str]]:
        for text in self.texts:
            yield iter((text,))

    def sample(self, max_bytes: int | None, seed: int) -> list[str]:
        """All texts (in order) when they fit; otherwise seeded blocks of SAMPLE_BLOCK characters whose
        UTF-8 size stays within ``max_bytes``."""
        if max_bytes is None or self.nbytes <= max_bytes:
            return list(self.texts)
        # characters <= bytes, so choose by characters and then check each block's encoded size
        chosen = choose_blocks([len(t) for t in self.texts], SAMPLE_BLOCK, max_bytes, seed)
        out, used = [], 0
        for d, s, e in chosen:
            piece = self.texts[d][s:e]
            size = len(piece.encode("utf-8"))
            if used + size <= max_bytes:
                out.append(piece)
                used += size
        return out


@dataclass(frozen=True)
class FileSpan:
    """Bytes ``[start, end)`` of a UTF-8 file, one document."""

    path: Path
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    def raw(self, start: int | None = None, end: int | None = None) -> Iterator[tuple[int, bytes]]:
        """``(file offset, bytes)`` reads of ``[start, end)`` (default: the whole span)."""
        start = self.start if start is None else start
        end = self.end if end is None else end
        with open(self.path, "rb") as f:
            f.seek(start)
            pos = start
            while pos < end:
                data = f.read(min(READ_BYTES, end - pos))
                if not data:
                    raise ValueError(f"{self.path}: file shrank while being read (ended at byte {pos})")
                yield pos, data
                pos += len(data)

    def text(self) -> Iterator[str]:
        """The span decoded as strict UTF-8, streamed; binary content or bad UTF-8 names the byte offset."""
        decoder = codecs.getincrementaldecoder("utf-8")("strict")
        first = self.start == 0
        for pos, data in self.raw():
            nul = data.find(b"\x00")
            if nul >= 0:
                raise ValueError(f"{self.path}: looks binary "
                                 f"(NUL byte at byte offset {pos + nul}); expected UTF-8 text")
            pending = len(decoder.getstate()[0])
            try:
                text = decoder.decode(data)
            except UnicodeDecodeError as e:
                at = pos - pending + e.start
                raise ValueError(f"{self.path}: not valid UTF-8 at byte offset {at}: {e.reason}") from None
            if first:
                text, first = text.removeprefix("\ufeff"), False
            if text:
                yield text
        try:
            tail = decoder.decode(b"", final=True)
        except UnicodeDecodeError as e:
            raise ValueError(f"{self.path}: not valid UTF-8 at byte offset {self.end - 1}: {e.reason} "
                             "(the file ends inside a character)") from None
        if tail:
            yield tail

    def has_text(self) -> bool:
        """Whether the span holds anything but whitespace (reads only up to the first such character)."""
        return any(block.strip() for block in self.text())


@dataclass(frozen=True)
class FileSpans(Documents):
    """Documents that are byte ranges of files, read in blocks of READ_BYTES (``data=text``)."""

    spans: tuple[FileSpan, ...]

    @property
    def nbytes(self) -> int:  # type: ignore[override]
        return sum(s.nbytes for s in self.spans)

    @property
    def origin(self) -> str:  # type: ignore[override]
        paths = list(dict.fromkeys(str(s.path) for s in self.spans))
        return ", ".join(paths[:5]) + (f" (and {len(paths) - 5} more files)" if len(paths) > 5 else "")

    def blocks(self) -> Iterator[Iterator[str]]:
        for span in self.spans:
            yield span.text()

    def sample(self, max_bytes: int | None, seed: int) -> list[str]:
        """All spans when they fit; otherwise seeded blocks of SAMPLE_BLOCK bytes, trimmed to whole lines
        (the part before a block's first newline and after its last belongs to its neighbours)."""
        if max_bytes is None or self.nbytes <= max_bytes:
            return ["".join(span.text()) for span in self.spans]
        out = []
        for d, s, e in choose_blocks([span.nbytes for span in self.spans], SAMPLE_BLOCK, max_bytes, seed):
            span = self.spans[d]
            data = b"".join(chunk for _, chunk in span.raw(span.start + s, span.start + e))
            first = data.find(b"\n") + 1 if s > 0 else 0
            last = data.rfind(b"\n") + 1 if span.start + e < span.end else len(data)
            if last <= first:  # no line break in the block: keep it, cut at character boundaries
                first, last = 0, len(data)
            out.append(data[first:last].decode("utf-8", errors="ignore").removeprefix("\ufeff"))
        return out


def split_point(path: Path, size: int, val_fraction: float) -> int:
    """Byte offset where a file's validation tail begins: after the last newline before
    ``(1 - val_fraction) * size`` if that lies in the second half, else the cut itself moved back to a
    character boundary."""
    cut = int(size * (1.0 - val_fraction))
    with open(path, "rb") as f:
        pos = cut
        while pos > size // 2:
            lo = max(size // 2, pos - READ_BYTES)
            f.seek(lo)
            data = f.read(pos - lo)
            newline = data.rfind(b"\n")
            if newline >= 0 and lo + newline > size // 2:
                return lo + newline + 1
            pos = lo
        while cut > 0:  # not inside a character: step back over UTF-8 continuation bytes (at most 3)
            f.seek(cut)
            byte = f.read(1)
            if not byte or byte[0] & 0xC0 != 0x80:
                break
            cut -= 1
    return cut


def file_spans(paths: Sequence[Path], val_fraction: float) -> tuple[list[FileSpan], list[FileSpan]]:
    """Each file's head (train) and tail (validation) as spans; whitespace-only parts are left out."""
    train, val = [], []
    for path in paths:
        size = os.path.getsize(path)
        cut = split_point(path, size, val_fraction)
        head, tail = FileSpan(path, 0, cut), FileSpan(path, cut, size)
        if head.has_text():
            train.append(head)
            if tail.has_text():
                val.append(tail)
    return train, val
