"""Long documents encoded in bounded pieces, with the ids one tokenizer call on the whole document gives.

A document is cut into pieces of about ``Cuts.piece`` characters: at the start of a whitespace run in the
piece's second half (one with no long word just after it, if there is one), else before a punctuation or
symbol character there, else at the first such place after it (the piece grows, up to ``Cuts.longest``; past
that, anywhere). Each piece is encoded inside a *window* that holds up to ``Cuts.context`` characters of the
document on either side, and keeps the tokens whose start offset falls in the piece: its first tokens see the
text before them as they do in the whole document, and what a window's edge changes (Llama's "▁" or a
byte-level prefix space before its first word, a word cut in two) falls on tokens that are dropped. The two
windows at a cut must agree on the tokens just after it (those that start within ``Cuts.check`` characters of
it and any across it: ids and offsets); then the kept tokens tile the text there, none twice and none missing.
Where they do not (a word longer than the context), the two pieces are encoded again as one, up to
``Cuts.longest`` characters; past that the cut is a hard one, each side encoded without the other (every
character still encoded once, the ids near it may differ from one call), and counted.

``windows`` cuts a document streamed in blocks; ``Tiler`` turns encoded windows into kept tokens;
``encode_texts`` does both in memory (zoo.data.pretokenize streams them to disk).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

PIECE_CHARS = 4096  # longest piece in a window when a soft cut is near (memory per window stays small)
CONTEXT_CHARS = 256  # document text either side of a piece, seen but not kept
LONGEST_PIECE_CHARS = 4 * PIECE_CHARS  # a piece grows to a soft cut, or a failing cut is mended, up to this

_RUN_START = re.compile(r"(?<=\S)\s")  # the first character of a whitespace run
_SYMBOL = re.compile(r"[^\w\s]")  # punctuation or a symbol
# greedy: the last one
_LAST = {p: re.compile(r"(?s:.*)(?:" + p.pattern + ")") for p in (_RUN_START, _SYMBOL)}
_SOFT = re.compile(f"{_RUN_START.pattern}|{_SYMBOL.pattern}")


@dataclass(frozen=True)
class Cuts:
    """Where a document is cut and how much of it each window sees."""

    piece: int = PIECE_CHARS
    context: int = CONTEXT_CHARS
    longest: int = LONGEST_PIECE_CHARS

    def __post_init__(self) -> None:
        if not 2 <= self.piece <= self.longest or self.context < 0:
            raise ValueError(f"Cuts(piece={self.piece}, context={self.context}, longest={self.longest}): "
                             "need 2 <= piece <= longest and context >= 0")

    @property
    def check(self) -> int:
        """Two windows at a cut must agree on the tokens that start within this many characters of it."""
        return max(1, self.context // 2)


CUTS = Cuts()


@dataclass(frozen=True)
class Window:
    """A piece of a document with its context: the piece is ``text[lo:hi]``; ``text[0]`` is character ``at``
    of the document."""

    text: str
    lo: int
    hi: int
    at: int

    @property
    def piece(self) -> str:
        return self.text[self.lo : self.hi]

    @property
    def start(self) -> int:
        """Document position of the piece's first character."""
        return self.at + self.lo

    @property
    def end(self) -> int:
        return self.at + self.hi


def piece_end(text: str, start: int, final: bool, cuts: Cuts = CUTS) -> int | None:
    """End of the piece of ``text`` starting at ``start`` (see the module docstring); None when ``text`` is
    not ``final`` (more of the document follows) and holds too little to decide, or to give the cut its
    context."""
    n = len(text)
    if final and n - start <= cuts.piece:
        return n
    if not final and n - start < cuts.piece + cuts.context:
        return None
    half, full = start + cuts.piece // 2, start + cuts.piece
    end = _last_run_start(text, half, full, cuts.context)
    if end is not None:
        return end
    found = _LAST[_SYMBOL].match(text, half, full)
    if found:
        return found.end() - 1
    limit = start + cuts.longest
    found = _SOFT.search(text, full, min(n, limit))
    end = found.start() if found else min(n, limit)
    if not final and end + cuts.context > n:
        return None  # a soft cut may still come, or the cut's context is not read yet
    return end


def _last_run_start(text: str, low: int, high: int, context: int) -> int | None:
    """The last start of a whitespace run in ``text[low:high]`` with no word of ``context // 2`` characters in
    the ``context`` after it, else the last one (None: there is none). A long word just after a cut is cut
    short in the window before, whose tokens then differ from the next window's: the windows would have to be
    joined."""
    last, long_word = None, _long_word(max(1, context // 2))
    while found := _LAST[_RUN_START].match(text, low, high):
        cut = found.end() - 1
        if not long_word.search(text, cut, cut + context):
            return cut
        last, high = cut if last is None else last, cut
    return last


@lru_cache
def _long_word(length: int) -> re.Pattern:
    return re.compile(rf"\S{{{length}}}")


def windows(blocks: Iterable[str], cuts: Cuts = CUTS) -> Iterator[Window]:
    """The windows of one document given as consecutive ``blocks``, without joining them: held in memory is
    the text from ``cuts.context`` characters before the current piece to what deciding its end needs. The
    same windows for any split into blocks."""
    buf, base, start = "", 0, 0  # buf[0] is document position `base`; `start` indexes the next piece in buf
    ready = 0  # try to cut once buf is this long (small blocks would otherwise search the same text again)
    for block in blocks:
        buf += block
        if len(buf) < ready:
            continue
        while (end := piece_end(buf, start, final=False, cuts=cuts)) is not None:
            yield _window(buf, start, end, cuts.context, base)
            start = end
        keep = max(0, start - cuts.context)
        buf, base, start = buf[keep:], base + keep, start - keep
        ready = len(buf) + cuts.piece // 2
    while start < len(buf):
        end = piece_end(buf, start, final=True, cuts=cuts)
        yield _window(buf, start, end, cuts.context, base)
        start = end


def _window(buf: str, start: int, end: int, context: int, base: int) -> Window:
    first, last = max(0, start - context), min(len(buf), end + context)
    return Window(buf[first:last], start - first, end - first, base + first)


class Tokens:
    """A window's encoding (a ``tokenizers`` Encoding of ``window.text``). Token starts never decrease along
    an encoding (the library emits tokens in text order; tests check it for every tokenizer kind), so the
    tokens a piece keeps are a range of indices found by bisection, and only tokens near a cut are read one by
    one: reading every token's offsets would cost a third of the encoding itself."""

    def __init__(self, window: Window, encoding: Any) -> None:
        self.window, self.encoding = window, encoding

    @cached_property
    def ids(self) -> list[int]:
        return self.encoding.ids

    def span(self, i: int) -> tuple[int, int]:
        """Window offsets (start, end) of token ``i``."""
        return self.encoding.token_to_chars(i)

    def first_from(self, position: int) -> int:
        """Index of the first token that starts at or after window ``position`` (the count when none does)."""
        return bisect_left(range(len(self.encoding)), position, key=lambda i: self.span(i)[0])

    @cached_property
    def kept(self) -> slice:
        """The tokens that start inside the piece. At an edge without context every token counts (a trimmed
        space at a document's end starts at its length)."""
        window = self.window
        first = self.first_from(window.lo) if window.lo > 0 else 0
        last = self.first_from(window.hi) if window.hi < len(window.text) else len(self.encoding)
        return slice(first, last)

    def kept_ids(self) -> np.ndarray:
        """(k,) int64"""
        return np.asarray(self.ids[self.kept], dtype=np.int64)

    def kept_ends(self) -> np.ndarray:
        """(k,) int64: window offset where each kept token ends"""
        return np.asarray([end for _, end in self.encoding.offsets[self.kept]], dtype=np.int64)

    def past(self, cut: int, width: int) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and document offsets of the tokens after document position ``cut`` that start within ``width``
        characters of it, and of any token across it."""
        at = self.window.at
        first = self.first_from(cut - at)
        while first > 0 and self.span(first - 1)[1] > cut - at:
            first -= 1
        last = self.first_from(cut + width - at)
        spans = [self.span(i) for i in range(first, last)]
        return self.ids[first:last], [(start + at, end + at) for start, end in spans]


def agree(before: Tokens, after: Tokens, width: int) -> bool:
    """Whether the windows either side of a cut tokenize the text just after it alike (a token across the cut
    included). What a window's edge changes spreads from the edge through the word there: had the end of the
    window before reached back over the cut, or the start of the one after reached past it, these tokens would
    differ (each window's is changed by its own edge only). Tokens before the cut are not compared: of a long
    word that ends at the cut, the window after sees only the end, and drops it anyway."""
    cut = before.window.end
    return before.past(cut, width) == after.past(cut, width)


def joined(before: Window, after: Window) -> Window:
    """One window over both pieces, with the context of each at its own end."""
    return Window(before.text[: before.hi] + after.text[after.lo :], before.lo,
                  before.hi + after.hi - after.lo, before.at)


class Tiler:
    """Encoded windows of documents, in document order -> each piece's tokens, cuts checked and mended.

    ``push(window, encoding)`` for each window and ``push(None)`` at each document's end return what is final:
    ``Tokens`` (``tokens.kept_ids()``) and ``None`` where a document ends. One window is held back until the
    next one has checked the cut between them. ``encode``: one text -> a ``tokenizers`` Encoding (for
    mending)."""

    def __init__(self, encode: Callable[[str], Any], cuts: Cuts = CUTS) -> None:
        self.encode, self.cuts = encode, cuts
        self.held: Tokens | None = None
        self.joins = self.hard_cuts = 0  # cuts mended by encoding both pieces as one / cut without context

    def push(self, window: Window | None, encoding: Any = None) -> list[Tokens | None]:
        if window is None:
            out, self.held = [self.held, None] if self.held is not None else [None], None
            return out
        tokens = Tokens(window, encoding)
        if self.held is None:
            self.held = tokens
            return []
        out, self.held = self._cut(self.held, tokens)
        return out

    def feed(self, items: Sequence[Window | None], encodings: Iterable[Any]) -> list[Tokens | None]:
        """``push`` each of ``items`` (windows and document ends), in order, with its windows' encodings."""
        encoded = iter(encodings)
        return [out for item in items for out in self.push(item, None if item is None else next(encoded))]

    def _cut(self, before: Tokens, after: Tokens) -> tuple[list[Tokens], Tokens]:
        """(final tokens, the tokens to hold) for two windows of a document that meet at a cut."""
        if agree(before, after, self.cuts.check):
            return [before], after
        b, a = before.window, after.window
        if (b.hi - b.lo) + (a.hi - a.lo) <= self.cuts.longest:
            self.joins += 1
            return [], self._tokens(joined(b, a))
        self.hard_cuts += 1  # each side alone: every character encoded once, as without context
        left = Window(b.text[: b.hi], b.lo, b.hi, b.at)
        right = Window(a.text[a.lo :], 0, a.hi - a.lo, a.start)
        return [self._tokens(left)], self._tokens(right)

    def _tokens(self, window: Window) -> Tokens:
        return Tokens(window, self.encode(window.text))


def encode_texts(hf: Any, texts: Sequence[str], cuts: Cuts = CUTS, batch: int = 4096) -> list[list[int]]:
    """Each text's ids without special tokens, equal to ``hf.encode(text)``'s; a long text is encoded window
    by window, ``batch`` windows per multi-threaded ``encode_batch`` call. ``hf``: a
    ``tokenizers.Tokenizer``."""
    items: list[Window | None] = []
    for text in texts:
        items.extend(windows((text,), cuts))
        items.append(None)
    tiler = Tiler(lambda text: hf.encode(text, add_special_tokens=False), cuts)
    rows: list[list[int]] = []
    row: list[np.ndarray] = []
    for first in range(0, len(items), batch):
        part = items[first : first + batch]
        encodings = hf.encode_batch([w.text for w in part if w is not None], add_special_tokens=False)
        for tokens in tiler.feed(part, encodings):
            if tokens is None:
                rows.append(np.concatenate(row).tolist() if row else [])
                row = []
            else:
                row.append(tokens.kept_ids())
    return rows
