"""How the zoo lm-eval model scores token requests, without lm-eval itself: each (context, continuation) pair
becomes one causal input cut to the model's window as lm-eval's `hf` model cuts it, the inputs run longest
first in right-padded batches (one forward per batch), and each continuation's log-probability and
"is it the greedy continuation" are read back in the callers' order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

Forward = Callable[[torch.Tensor], torch.Tensor]  # ids (B, T) -> logits (B, T, V)


@dataclass(frozen=True)
class TokenRequest:
    """One scoring request in ids: the continuation's tokens are scored given everything before them."""

    context: tuple[int, ...]
    continuation: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.context or not self.continuation:
            raise ValueError(f"a scoring request needs at least one context and one continuation token, got "
                             f"{len(self.context)} and {len(self.continuation)}")

    def model_input(self, max_length: int) -> list[int]:
        """The ids the model reads: context + continuation without its last token (nothing predicts after
        it), at most `max_length` of them, cut from the left as lm-eval's hf model cuts a long request."""
        if len(self.continuation) > max_length:
            raise ValueError(f"a continuation of {len(self.continuation)} tokens does not fit the model's "
                             f"window of {max_length} tokens")
        return [*self.context, *self.continuation][-(max_length + 1):][:-1]


def longest_first(requests: Sequence[TokenRequest]) -> list[int]:
    """Indices of `requests`, longest first (ties: by their ids), so a batch's first row sets its width and
    similar lengths share a batch."""
    def key(i: int) -> tuple[int, tuple[int, ...]]:
        ids = requests[i].context + requests[i].continuation
        return -len(ids), ids

    return sorted(range(len(requests)), key=key)


def pad_right(rows: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """Rows of ids as one (B, T) tensor, padded on the right; a causal model's real positions never see the
    padding after them, so no mask is needed."""
    width = max(len(r) for r in rows)
    return torch.tensor([[*r, *[pad_id] * (width - len(r))] for r in rows], dtype=torch.long)


def score_rows(logprobs: torch.Tensor, inputs: Sequence[Sequence[int]],
               continuations: Sequence[Sequence[int]]) -> list[tuple[float, bool]]:
    """(sum of the continuation's log-probabilities, whether each of its tokens is the argmax) per row of
    `logprobs` (B, T, V): row i's continuation is predicted at the last len(continuation) real positions."""
    out = []
    for row, inp, cont in zip(logprobs, inputs, continuations, strict=True):
        end = len(inp)
        scored = row[end - len(cont):end]  # (C, V)
        target = torch.tensor(cont, dtype=torch.long, device=row.device)
        total = scored.gather(-1, target[:, None]).sum()
        out.append((float(total), bool((scored.argmax(-1) == target).all())))
    return out


def loglikelihoods(forward: Forward, requests: Sequence[TokenRequest], *, max_length: int, batch_size: int,
                   pad_id: int) -> list[tuple[float, bool]]:
    """Score every request with `forward`, `batch_size` rows per call, longest first; results in the order of
    `requests`."""
    order = longest_first(requests)
    results: list[tuple[float, bool] | None] = [None] * len(requests)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        inputs = [requests[i].model_input(max_length) for i in chunk]
        with torch.no_grad():
            logprobs = torch.log_softmax(forward(pad_right(inputs, pad_id)).float(), dim=-1)  # (B, T, V)
        scores = score_rows(logprobs, inputs, [requests[i].continuation for i in chunk])
        for i, score in zip(chunk, scores, strict=True):
            results[i] = score
    return results  # type: ignore[return-value]
