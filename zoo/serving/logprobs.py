"""Log-probabilities of the tokens a row picks, as OpenAI's two formats report them. They are taken from the
model's raw next-token distribution, log_softmax of its logits before penalties, logit bias, temperature and
top-p (vLLM's default, `raw_logprobs`), so they do not depend on how the token was picked. A token's text is
its id decoded alone with special tokens kept (a byte-level token holding part of a UTF-8 character shows
as U+FFFD); `bytes` are that text's UTF-8 bytes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

FLOOR = -9999.0  # OpenAI's value for a log-probability too small to show (JSON has no -inf)


@dataclass(frozen=True)
class TokenLogprob:
    """The picked token's log-probability and the `top` most likely (token id, log-probability) pairs."""

    logprob: float
    top: tuple[tuple[int, float], ...]


def pick_logprobs(logits: torch.Tensor, tokens: torch.Tensor, wanted: Sequence[int | None],
                  ) -> list[TokenLogprob | None]:
    """Raw logits (B, V) and the picked tokens (B,) -> per row, None where `wanted` is None, else the token's
    log-probability with the wanted[i] most likely tokens."""
    rows = [i for i, n in enumerate(wanted) if n is not None]
    out: list[TokenLogprob | None] = [None] * len(wanted)
    if not rows:
        return out
    index = torch.tensor(rows, dtype=torch.long, device=logits.device)
    logp = torch.log_softmax(logits.index_select(0, index).float(), dim=-1)  # (k, V)
    chosen = logp.gather(-1, tokens.index_select(0, index)[:, None])[:, 0].tolist()
    k = max(wanted[i] for i in rows)  # type: ignore[type-var]
    top_lp, top_id = logp.topk(k, dim=-1) if k else (logp[:, :0], logp[:, :0].long())
    top_lp, top_id = top_lp.tolist(), top_id.tolist()
    for j, i in enumerate(rows):
        n = wanted[i]
        top = zip(top_id[j][:n], top_lp[j][:n], strict=True)
        out[i] = TokenLogprob(max(chosen[j], FLOOR), tuple((t, max(lp, FLOOR)) for t, lp in top))
    return out


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
