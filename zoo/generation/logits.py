"""Logit processors for sampling: temperature, top-k and top-p (nucleus), applied in that order to
next-token logits (B, V). Each returns new logits; removed tokens get -inf so softmax gives them 0."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

LogitsProcessor = Callable[[torch.Tensor], torch.Tensor]


def temperature(t: float) -> LogitsProcessor:
    """Divide by t: t < 1 sharpens, t > 1 flattens (t = 0 is greedy and handled by the caller)."""

    def apply(logits: torch.Tensor) -> torch.Tensor:
        # shift by the row max first (softmax is unchanged): a tiny t then cannot overflow to inf - inf = NaN
        return (logits - logits.amax(dim=-1, keepdim=True)) / t

    return apply


def top_k(k: int) -> LogitsProcessor:
    """Keep the k largest logits per row (ties at the k-th value are kept too)."""

    def apply(logits: torch.Tensor) -> torch.Tensor:
        if k >= logits.shape[-1]:
            return logits
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (B, 1)
        return logits.masked_fill(logits < kth, float("-inf"))

    return apply


def top_p(p: float) -> LogitsProcessor:
    """Keep the smallest set of most likely tokens whose probability sums to >= p (at least one)."""

    def apply(logits: torch.Tensor) -> torch.Tensor:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # probability of strictly more likely tokens
        drop_sorted = mass_before >= p
        drop_sorted[..., 0] = False  # the most likely token stays (p=1e-300 is 0 in float32: it dropped all)
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        return logits.masked_fill(drop, float("-inf"))

    return apply


def build_processors(
    temperature_value: float | None, top_k_value: int | None, top_p_value: float | None
) -> list[LogitsProcessor]:
    """The processors a sampling config asks for; values that mean 'off' (None, 1.0, 0) add nothing."""
    chain: list[LogitsProcessor] = []
    if temperature_value is not None and temperature_value != 1.0:
        chain.append(temperature(temperature_value))
    if top_k_value:
        chain.append(top_k(top_k_value))
    if top_p_value is not None and top_p_value < 1.0:
        chain.append(top_p(top_p_value))
    return chain


def process(logits: torch.Tensor, chain: list[LogitsProcessor]) -> torch.Tensor:
    for processor in chain:
        logits = processor(logits)
    return logits


@dataclass
class Choice:
    """How next-token logits become tokens: greedy (argmax), or sampling through `processors`."""

    sample: bool = False
    processors: list[LogitsProcessor] = field(default_factory=list)
    generator: torch.Generator | None = None

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., V) raw logits -> the distribution tokens are drawn from."""
        return process(logits, self.processors).softmax(dim=-1)

    def draw(self, probs: torch.Tensor) -> torch.Tensor:
        """(B, V) -> (B, 1)."""
        return torch.multinomial(probs, 1, generator=self.generator)

    def pick(self, logits: torch.Tensor) -> torch.Tensor:
        """(B, V) raw logits -> (B,) tokens."""
        return self.draw(self.probs(logits)).squeeze(1) if self.sample else logits.argmax(dim=-1)

    def uniform(self, device) -> float:
        return float(torch.rand((), generator=self.generator, device=device))
