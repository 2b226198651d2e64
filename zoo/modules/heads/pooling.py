"""How a head sums a sequence up in one vector: the position it pools, or the mean (model.head.pool), and the
optional dense + activation on it (model.head.pooler): BERT's pooler, RoBERTa's and DistilBERT's classifier
dense."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from zoo.modules.feedforward import ACTIVATIONS
from zoo.modules.heads.base import OutputHead
from zoo.registry import Registry, unknown_choice_message

Pooling = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None", "int | None"], torch.Tensor]
POOLINGS: Registry[Pooling] = Registry("pooling", key="model.head.pool")
NO_POOLER = "none"  # model.head.pooler value: no dense before the projection


@POOLINGS.register("first")
def pool_first(x: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
               pad_id: int | None) -> torch.Tensor:
    """(B, T, C) -> (B, C): the first position ([CLS], <s>, zoo's <bos>), as BERT-style encoders pool."""
    return x[:, 0]


@POOLINGS.register("last")
def pool_last(x: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
              pad_id: int | None) -> torch.Tensor:
    """(B, T, C) -> (B, C): the last real token, as transformers' decoder *ForSequenceClassification pools it:
    the rightmost token that is not pad_id (`(arange(T) * (ids != pad)).argmax(-1)`), so a reward model whose
    pad is its eos skips the trailing eos exactly as it was trained to; a given attention mask further
    excludes the positions it marks as padding; with neither, the last position. A row with no real token
    pools position 0 (argmax of zeros), as there."""
    b, t = x.shape[:2]
    real = None if pad_id is None else input_ids != pad_id  # (B, T)
    if attention_mask is not None:
        marked = attention_mask[:, -t:] != 0  # (B, T); a cached prefix's columns come first
        real = marked if real is None else real & marked
    if real is None:
        return x[:, -1]
    index = (torch.arange(t, device=x.device) * real).argmax(-1)  # (B,) rightmost real position
    return x[torch.arange(b, device=x.device), index]


@POOLINGS.register("mean")
def pool_mean(x: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
              pad_id: int | None) -> torch.Tensor:
    """(B, T, C) -> (B, C): the mean over the positions the attention mask marks real (every position without
    one), as ModernBERT's classifier_pooling=mean and sentence-transformers' mean pooling. pad_id is not
    read: a row is what its mask says. A row with no real token gives zeros."""
    if attention_mask is None:
        return x.mean(1)
    real = (attention_mask[:, -x.shape[1]:] != 0).to(x.dtype).unsqueeze(-1)  # (B, T, 1)
    return (x * real).sum(1) / real.sum(1).clamp(min=1)


def default_pooling(causal: bool) -> str:
    """A causal stack has seen the whole sequence only at its last token; a bidirectional one everywhere,
    and BERT-style models pool the first."""
    return "last" if causal else "first"


def pooler_names() -> list[str]:
    """Values model.head.pooler takes: none, or an ungated activation."""
    return [NO_POOLER, *(n for n in ACTIVATIONS.names() if not ACTIVATIONS.get(n).gated)]




class PoolingHead(OutputHead):
    """A head that pools one position and, with a pooler, applies dense + activation to it. Tensors:
    `head.pool.weight`, `head.pool.bias` (only with a pooler)."""

    def init_pooler(self, cfg, *, causal: bool, default_pooler: str) -> None:
        self.pooling = cfg.head.pool or default_pooling(causal)
        self.pool_fn = POOLINGS.get(self.pooling)
        self.pooler = cfg.head.pooler or default_pooler
        self.pool = None if self.pooler == NO_POOLER else nn.Linear(cfg.d_model, cfg.d_model)
        self.pool_activation = None if self.pool is None else ACTIVATIONS.get(self.pooler).fn
        self.pad_id = cfg.pad_id

    @classmethod
    def check_config(cls, cfg) -> None:
        head = cfg.head
        if head.pool is not None and head.pool not in POOLINGS:
            raise ValueError("model.head.pool: "
                             + unknown_choice_message("pooling", head.pool, POOLINGS.names())
                             + " (null: first on an encoder, last on a decoder)")
        if head.pooler is not None and head.pooler not in pooler_names():
            raise ValueError("model.head.pooler: "
                             + unknown_choice_message("pooler", head.pooler, pooler_names())
                             + " (null: the head's default)")

    def pooled(self, x: torch.Tensor, input_ids: torch.Tensor,
               attention_mask: torch.Tensor | None) -> torch.Tensor:
        """x (B, T, C) -> (B, C): the pooled position, through the pooler when there is one."""
        h = self.pool_fn(x, input_ids, attention_mask, self.pad_id)  # (B, C)
        return h if self.pool is None else self.pool_activation(self.pool(h))
