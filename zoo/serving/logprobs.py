"""Log-probabilities of the tokens a row picks (the record the engine fills,
zoo.generation.continuous.token_logprob) in OpenAI's two formats, which the endpoints render. A token's text
is its id decoded alone with special tokens kept (a byte-level token holding part of a UTF-8 character shows
as U+FFFD); `bytes` are that text's UTF-8 bytes. Free of torch: the worker processes that prepare requests
import the endpoints, hence this."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from zoo.generation.continuous.token_logprob import TokenLogprob

Decode = Callable[..., str]


def token_text(decode: Decode, token: int) -> str:
    """One token's text as the logprobs formats show it: decoded alone, special tokens kept."""
    return decode([token], skip_special_tokens=False)


def completion_logprobs(entries: Sequence[tuple[int, TokenLogprob | None]], offsets: Sequence[int],
                        decode: Decode) -> dict[str, Any]:
    """/v1/completions' `logprobs`: parallel lists over `entries` (token id, its TokenLogprob; None for an
    echoed prompt's first token, which nothing predicts) with each token's character offset in the text."""
    return {"tokens": [token_text(decode, t) for t, _ in entries],
            "token_logprobs": [None if e is None else e.logprob for _, e in entries],
            "top_logprobs": [None if e is None else {token_text(decode, t): lp for t, lp in e.top}
                             for _, e in entries],
            "text_offset": list(offsets)}


def chat_logprobs(entries: Sequence[tuple[int, TokenLogprob]], decode: Decode) -> dict[str, Any]:
    """/v1/chat/completions' `logprobs`: {"content": [{token, logprob, bytes, top_logprobs}], "refusal"}."""
    def one(token: int, logprob: float) -> dict[str, Any]:
        text = token_text(decode, token)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return {"content": [{**one(t, e.logprob), "top_logprobs": [one(i, lp) for i, lp in e.top]}
                        for t, e in entries], "refusal": None}
