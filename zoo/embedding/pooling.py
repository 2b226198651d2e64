"""How a sentence embedding sums a text's token vectors up (`pooling=`), as sentence-transformers' Pooling
modes: the mean over real tokens, the first token ([CLS]), the last real token, or the element-wise maximum.
Each takes the last hidden states (B, T, C) and the attention mask (B, T) of a right-padded batch."""

from __future__ import annotations

from collections.abc import Callable

import torch

from zoo.modules.heads.pooling import pool_last
from zoo.registry import Registry

SentencePooling = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
POOLINGS: Registry[SentencePooling] = Registry("sentence pooling", key="pooling")


@POOLINGS.register("mean")
def pool_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T, C) -> (B, C): the mean over real tokens (pads never count; a row without one is zero)."""
    m = mask[..., None].to(x.dtype)  # (B, T, 1)
    return (x * m).sum(1) / m.sum(1).clamp(min=1e-9)


@POOLINGS.register("cls")
def pool_cls(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T, C) -> (B, C): the first token ([CLS], <s>): real in every right-padded row."""
    return x[:, 0]


@POOLINGS.register("last")
def pool_last_token(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T, C) -> (B, C): the last real token (decoders' embedding: only it has seen the whole text)."""
    return pool_last(x, torch.empty(0), mask, None)


@POOLINGS.register("max")
def pool_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T, C) -> (B, C): the element-wise maximum over real tokens."""
    return x.masked_fill(mask[..., None] == 0, float("-inf")).max(1).values
