"""The log-probabilities of the tokens the rows pick (the engine's side: zoo.serving.logprobs renders them).
They are taken from the model's raw next-token distribution, log_softmax of its logits before penalties, logit
bias, temperature and top-p (vLLM's default, `raw_logprobs`), so they do not depend on how the token was
picked."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from zoo.generation.continuous.token_logprob import FLOOR, TokenLogprob


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
