"""Stop strings: a row stops as soon as its decoded continuation (the generated tokens only, never the prompt)
contains one of the strings, checked after every token. Only the tail of each row is decoded per token (the
last tokens, enough to hold the longest stop string, looking further back over tokens that decode to no text);
a hit there is confirmed on the whole continuation, so a row never stops on text its full decode does not
contain. The text before the stop string is what callers keep (lm-eval's generate_until, the server's
`stop`), exactly as cutting after a full run."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Decode = Callable[[list[int]], str]  # token ids -> text (a tokenizer's decode)
SLACK = 8  # tokens beyond the longest stop string's length: tokens that decode to nothing (partial bytes)


def check_stop_strings(stops: object) -> list[str]:
    """`stops` (a string or a list of strings) as a list of non-empty strings, else one ValueError."""
    listed = [stops] if isinstance(stops, str) else stops
    if not isinstance(listed, (list, tuple)) or not listed or not all(isinstance(s, str) and s
                                                                      for s in listed):
        raise ValueError(f"stop_strings must be a non-empty string or a list of them, got {stops!r}")
    return list(listed)


class RowStop:
    """One row's continuation as it grows; `add(token)` is True once its text contains a stop string."""

    def __init__(self, stops: Sequence[str], decode: Decode) -> None:
        self.stops, self.decode = list(stops), decode
        self.longest = max(len(s) for s in self.stops)
        self.ids: list[int] = []

    def add(self, token: int) -> bool:
        """Append one generated token; True when the continuation now contains a stop string."""
        self.ids.append(token)
        window = self.longest + SLACK
        tail = self.decode(self.ids[-window:])
        while len(tail) < self.longest + SLACK and window < len(self.ids):  # tokens of no text: look further
            window *= 2
            tail = self.decode(self.ids[-window:])
        if not any(s in tail for s in self.stops):
            return False
        text = self.decode(self.ids) if len(self.ids) > window else tail
        return any(s in text for s in self.stops)


class StopStrings:
    """Stop strings over a batch of rows, for a decoding loop: `update(tokens, finished)` feeds one new token
    per row (B,) and answers which rows stop with it; rows already finished (EOS, or an earlier stop) are not
    read, since they only receive padding."""

    def __init__(self, stops: object, decode: Decode) -> None:
        self.stops, self.decode = check_stop_strings(stops), decode
        self.rows: list[RowStop] = []

    def update(self, tokens: torch.Tensor, finished: torch.Tensor) -> torch.Tensor:
        """(B,) new tokens, (B,) rows finished before them -> (B,) bool: rows whose stop string just ended."""
        if len(self.rows) != tokens.shape[0]:  # first call (rows may have been expanded for n samples)
            self.rows = [RowStop(self.stops, self.decode) for _ in range(tokens.shape[0])]
        done = finished.tolist()
        hits = [not d and row.add(t) for row, t, d in zip(self.rows, tokens.tolist(), done, strict=True)]
        return torch.tensor(hits, dtype=torch.bool, device=tokens.device)


def overlap_free(stops: Sequence[str]) -> bool:
    """True when no stop string contains another or ends with the start of another. Then the first stop
    string to complete is also the first to begin, so stopping there leaves the same text as cutting a
    longer run at each stop string in turn (lm-eval's cut); overlapping stops may not."""
    def overlap(a: str, b: str) -> bool:
        return a in b or any(a.endswith(b[:k]) for k in range(1, min(len(a), len(b))))

    return not any(overlap(a, b) for a in stops for b in stops if a != b)
