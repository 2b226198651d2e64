"""OpenAI's presence / frequency penalties and logit bias for one row of the running batch: before a token is
picked, `logits[j] -= c[j] * frequency_penalty + (c[j] > 0) * presence_penalty` and `+= logit_bias[j]`,
where c[j] counts token j among the tokens this row has generated so far (the prompt does not count)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(eq=False)
class Penalties:
    """One row's penalties and bias; `apply` adjusts its (V,) logits, `count` records a generated token."""

    frequency: float = 0.0
    presence: float = 0.0
    bias: dict[int, float] = field(default_factory=dict)  # token id -> added logit, in [-100, 100]
    counts: torch.Tensor | None = field(default=None, repr=False)  # (V,) generated tokens so far
    _bias: torch.Tensor | None = field(default=None, init=False, repr=False)  # (V,) `bias`, built with counts

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """(V,) -> (V,) adjusted logits (a new tensor)."""
        if self.counts is None:
            self.counts = torch.zeros(logits.shape[-1], dtype=logits.dtype, device=logits.device)
            if self.bias:
                ids = torch.tensor(list(self.bias), dtype=torch.long, device=logits.device)
                self._bias = torch.zeros_like(self.counts).index_put_(
                    (ids,), torch.tensor(list(self.bias.values()), dtype=logits.dtype, device=logits.device))
        out = logits - self.counts * self.frequency - (self.counts > 0).to(logits.dtype) * self.presence
        return out if self._bias is None else out + self._bias

    def count(self, token: int) -> None:
        """Record one generated token (counts exist once `apply` has run; the engine applies first)."""
        if self.counts is not None:
            self.counts[token] += 1
