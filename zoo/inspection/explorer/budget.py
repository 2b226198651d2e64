"""Holding the explorer page to `html_max_mb` (1 MB = 10^6 bytes of the written file, everything counted:
template, script, every JSON field, the notes). The tokens, shape trace, beam tree and tables are always
kept; the big arrays are optional parts, each of which says what it costs and what it left out:

    next-token logits (the last positions), the positional pattern, the attention weights of each kind
    (evenly spaced layers, or evenly spaced heads of one layer), and the masks.

Filling order: the smallest useful piece of every part (the last position's logits, the pattern, one head of
one layer per kind, each mask), then half of what is left to attention, the rest to more logit positions, and
whatever that leaves back to attention. Sizes are exact (the JSON is composed of the parts' own JSON), so the
written page is at most `html_max_mb`; a page that cannot fit even with every part left out is refused with
the size it needs."""

from __future__ import annotations

import functools
import math
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from zoo.inspection.explorer.pack import b64_chars, float16_header, pack_float16, pack_unit, unit_header
from zoo.inspection.explorer.page import chrome_bytes, json_bytes

MB = 1_000_000
TOP_TOKENS = 20  # labelled candidates per position (the page draws at most this many bars)


def size_text(n_bytes: int) -> str:
    return f"{n_bytes / MB:.3f} MB" if n_bytes >= 10_000 else f"{n_bytes:,} bytes"


class PageBudgetError(ValueError):
    """The page does not fit `html_max_mb` even with every optional part left out."""


def spaced(items: Sequence[int], k: int) -> list[int]:
    """k evenly spaced entries of `items` (first and last included when k >= 2)."""
    n = len(items)
    if k >= n:
        return list(items)
    if k == 1:
        return [items[0]]
    return [items[round(i * (n - 1) / (k - 1))] for i in range(k)]


class Part(Protocol):
    """One optional piece of the page: `choices()` from the largest to the smallest; `render(None)` is the
    form that says it was left out."""

    def choices(self) -> list[Any]: ...

    def render(self, choice: Any) -> Any: ...

    def size(self, choice: Any) -> int: ...

    def note(self, choice: Any, max_mb: float) -> str | None: ...


class WholePart:
    """A part kept whole or left out: a mask, the positional pattern."""

    def __init__(self, kept: dict[str, Any], dropped: dict[str, Any], what: str) -> None:
        self.kept, self.dropped, self.what = kept, dropped, what
        self._sizes = {True: json_bytes(kept), None: json_bytes(dropped)}

    def choices(self) -> list[Any]:
        return [True]

    def render(self, choice: Any) -> dict[str, Any]:
        return self.kept if choice else self.dropped

    def size(self, choice: Any) -> int:
        return self._sizes[choice]

    def note(self, choice: Any, max_mb: float) -> str | None:
        if choice or self.kept is self.dropped:  # kept, or nothing there to leave out
            return None
        return (f"{self.what} left out ({size_text(self.size(True) - self.size(None))}) to stay within "
                f"html_max_mb={max_mb:g}.")


class AttentionPart:
    """One attention kind's weights: all candidate layers with all heads, fewer evenly spaced layers, or
    one layer with fewer evenly spaced heads. `chosen`: the layers came from html_layers."""

    def __init__(self, kind: str, per_layer: Sequence[torch.Tensor], candidates: Sequence[int], q: str,
                 k: str, chosen: bool) -> None:
        self.kind, self.per_layer, self.candidates, self.chosen = kind, per_layer, list(candidates), chosen
        self.n_layers = len(per_layer)
        self.n_heads = per_layer[0].shape[0]  # each (H, Tq, Tk)
        self.base = {"q": q, "k": k, "n_layers": self.n_layers, "n_heads": self.n_heads}

    def choices(self) -> list[tuple[list[int], list[int]]]:
        heads = list(range(self.n_heads))
        by_layers = [(spaced(self.candidates, n), heads) for n in range(len(self.candidates), 0, -1)]
        by_heads = [(spaced(self.candidates, 1), spaced(heads, h)) for h in range(self.n_heads - 1, 0, -1)]
        return by_layers + by_heads

    def render(self, choice: tuple[list[int], list[int]] | None) -> dict[str, Any]:
        if choice is None:
            return {**self.base, "layers": [], "heads": [], "weights": None}
        layers, heads = choice
        weights = torch.stack([self.per_layer[i][heads] for i in layers])  # (L, h, Tq, Tk)
        return {**self.base, "layers": layers, "heads": heads, "weights": pack_unit(weights)}

    def size(self, choice: tuple[list[int], list[int]] | None) -> int:
        if choice is None:
            return json_bytes(self.render(None))
        layers, heads = choice
        shape = [len(layers), len(heads), *self.per_layer[0].shape[1:]]
        header = {**self.base, "layers": layers, "heads": heads, "weights": {**unit_header(shape), "b64": ""}}
        return json_bytes(header) + b64_chars(math.prod(shape))

    def note(self, choice: tuple[list[int], list[int]] | None, max_mb: float) -> str | None:
        picked = f"html_layers {self.candidates}" if self.chosen else f"0..{self.n_layers - 1}"
        if choice is None:
            one = self.size((spaced(self.candidates, 1), [0])) - self.size(None)
            return (f"{self.kind} attention left out: one head of one layer takes {size_text(one)}, more "
                    f"than html_max_mb={max_mb:g} leaves for it (shorten the text or raise html_max_mb).")
        layers, heads = choice
        if len(layers) == len(self.candidates) and len(heads) == self.n_heads:
            return None
        kept = f"layers {layers} of {picked}"
        if len(heads) < self.n_heads:
            kept += f", heads {heads} of 0..{self.n_heads - 1}"
        return (f"{self.kind} attention: {kept} kept to stay within html_max_mb={max_mb:g}; pick others with "
                f"html_layers=[...].")


class LogitsPart:
    """Next-token logits (P, V) with labels for each position's top tokens; kept for the last n positions."""

    def __init__(self, logits: torch.Tensor, stream: str, label: Callable[[int], str]) -> None:
        self.logits, self.stream = logits, stream  # (P, V)
        self.n_positions, self.vocab_size = logits.shape
        self.top = self.logits.topk(min(TOP_TOKENS, self.vocab_size), dim=-1).indices.tolist()
        self._sizes: dict[int | None, int] = {}
        self.label = functools.cache(label)  # sizes of many position counts label the same ids

    def choices(self) -> list[int]:
        return list(range(self.n_positions, 0, -1))

    def _fields(self, n: int) -> dict[str, Any]:
        positions = list(range(self.n_positions - n, self.n_positions))
        labels = {str(i): self.label(i) for p in positions for i in self.top[p]}
        return {"stream": self.stream, "positions": positions, "vocab_size": self.vocab_size, "values": None,
                "labels": labels, "top": len(self.top[0])}

    def render(self, choice: int | None) -> dict[str, Any]:
        fields = self._fields(choice or 0)
        if choice:
            fields["values"] = pack_float16(self.logits[fields["positions"]])
        return fields

    def size(self, choice: int | None) -> int:
        if choice not in self._sizes:
            fields = self._fields(choice or 0)
            if choice:
                fields["values"] = {**float16_header([choice, self.vocab_size]), "b64": ""}
            self._sizes[choice] = json_bytes(fields) + (b64_chars(choice * self.vocab_size) if choice else 0)
        return self._sizes[choice]

    def note(self, choice: int | None, max_mb: float) -> str | None:
        last = self.n_positions - 1
        if choice is None:
            one = self.size(1) - self.size(None)
            return (f"next-token logits left out: one position takes {size_text(one)}, more than "
                    f"html_max_mb={max_mb:g} leaves for it.")
        if choice == self.n_positions:
            return None
        return (f"next-token logits kept for positions {last - choice + 1}..{last} of 0..{last} to stay "
                f"within html_max_mb={max_mb:g}.")


def _best_within(part: Part, allowance: int) -> Any:
    """The largest choice of `part` costing at most `allowance` bytes (None when not even the smallest)."""
    options = part.choices()  # sizes decreasing: the ones that fit come last
    first = bisect_left(options, True, key=lambda choice: part.size(choice) <= allowance)
    return options[first] if first < len(options) else None


def _fill(logits: Part, positional: Part, attention: list[Part], masks: list[Part],
          room: int) -> dict[int, Any]:
    """Choices per part (keyed by id) whose sizes beyond their left-out forms sum to at most `room`."""
    parts = [logits, positional, *attention, *masks]
    chosen: dict[int, Any] = {id(p): None for p in parts}
    left = room

    def extra(part: Part, choice: Any) -> int:
        return part.size(choice) - part.size(None)

    def grow(part: Part, allowance: int) -> None:
        nonlocal left
        current = extra(part, chosen[id(part)])
        choice = _best_within(part, part.size(None) + current + allowance)
        if choice is not None:
            left -= extra(part, choice) - current
            chosen[id(part)] = choice

    for part in parts:  # the smallest useful piece of each, in order
        smallest = part.choices()[-1]
        if extra(part, smallest) <= left:
            chosen[id(part)] = smallest
            left -= extra(part, smallest)
    share = left // 2 // max(len(attention), 1)
    for part in attention:
        if chosen[id(part)] is not None:
            grow(part, share)
    if chosen[id(logits)] is not None:
        grow(logits, left)
    for i, part in enumerate(attention):  # what the logits left
        if chosen[id(part)] is not None:
            grow(part, left // (len(attention) - i))
    return chosen


def fit_page(data: dict[str, Any], *, logits: LogitsPart, positional: WholePart,
             attention: list[AttentionPart], masks: list[WholePart], max_mb: float) -> dict[str, Any]:
    """Fill data's "logits", "positional", "attention", "masks" and "notes" so that the page written from it
    is at most `max_mb` MB; the notes say what was left out. Raises PageBudgetError naming html_max_mb and the
    size needed when even the fixed parts (everything else in `data`) do not fit."""
    parts: list[Part] = [logits, positional, *attention, *masks]

    def notes(chosen: dict[int, Any]) -> list[str]:
        return [n for p in parts if (n := p.note(chosen[id(p)], max_mb)) is not None]

    def assemble(chosen: dict[int, Any], said: list[str]) -> dict[str, Any]:
        return {**data, "logits": logits.render(chosen[id(logits)]),
                "positional": positional.render(chosen[id(positional)]),
                "attention": {p.kind: p.render(chosen[id(p)]) for p in attention},
                "masks": [m.render(chosen[id(m)]) for m in masks], "notes": said}

    limit = int(max_mb * MB)
    none = {id(p): None for p in parts}
    fixed = chrome_bytes() + json_bytes(assemble(none, [])) - json_bytes([])
    reserve = json_bytes(notes(none))
    least = fixed + reserve
    if least > limit:
        # 100-byte steps, 50 bytes above the least: room for the notes' longer html_max_mb number, and too
        # little for any optional part (a page at `need` is the smallest one, as the message says)
        need = math.ceil((least + 50) / 100) / 10_000
        raise PageBudgetError(
            f"html_max_mb={max_mb:g} is too small for this page: with every attention map, mask, positional "
            f"pattern and logit left out it still takes {least / MB:.3f} MB "
            f"(the template, tokens, shape trace, beam tree and tables); set html_max_mb={need:g} or more, "
            "or shorten the text.")
    for _ in range(len(parts) + 2):  # a longer note can only shrink the choices, so this settles
        chosen = _fill(logits, positional, attention, masks, limit - fixed - reserve)
        if json_bytes(notes(chosen)) <= reserve:
            break
        reserve = json_bytes(notes(chosen))
    else:
        chosen = none
    page = assemble(chosen, notes(chosen))
    if chrome_bytes() + json_bytes(page) > limit:  # the sizes above are exact; this guards the arithmetic
        raise RuntimeError(f"explorer page of {chrome_bytes() + json_bytes(page)} bytes exceeds {limit}.")
    return page
