"""One choice's text as its tokens arrive: the generated ids decoded as a whole (so multi-byte characters
and tokenizer clean-ups come out as `tokenizer.decode` gives them), stop strings found wherever they end,
and the piece safe to stream now: text that a later token cannot change or turn into a stop string."""

from __future__ import annotations

from dataclasses import dataclass, field

HOLD = "\ufffd"  # an incomplete UTF-8 character decodes to this until its last byte arrives


@dataclass
class ChoiceText:
    """Accumulates one choice's tokens; `add` returns the new text to send and whether a stop string
    ended it (its text stops before the stop string, which is never sent)."""

    decode: object  # ids -> text (tokenizer.decode, special tokens skipped)
    stops: list[str]
    ids: list[int] = field(default_factory=list)
    sent: int = 0  # characters of the text already handed out
    text: str = ""

    def add(self, token: int | None, final: bool) -> tuple[str, bool]:
        """(delta, stopped): after `token` (None: no new token); `final`: nothing more will come."""
        if token is not None:
            self.ids.append(token)
            self.text = self.decode(self.ids)
        cut = min((i for i in (self.text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.text = self.text[:cut]
            return self._take(cut), True
        return self._take(len(self.text) if final else self._safe_end()), False

    def _take(self, end: int) -> str:
        end = max(end, self.sent)
        delta, self.sent = self.text[self.sent : end], end
        return delta

    def _safe_end(self) -> int:
        """Hold back a tail that may still change: a prefix of a stop string, an unfinished character, and
        trailing spaces (decoders drop or merge them with what follows, e.g. ' ,' -> ',')."""
        text, end = self.text, len(self.text)
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:k]):
                    end = min(end, len(text) - k)
                    break
        while end > self.sent and text[end - 1] in (HOLD, " "):
            end -= 1
        return end
