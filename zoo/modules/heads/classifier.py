"""head=classifier (one label per sequence) and head=token_classifier (one label per token)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from zoo.modules.heads.base import HeadOutput, OutputHead, masked_mean_ce, register_head
from zoo.modules.heads.pooling import PoolingHead
from zoo.modules.heads.transform import TransformMixin, check_transform
from zoo.utils import IGNORE_INDEX


def check_num_labels(cfg) -> None:
    if cfg.head.num_labels < 1:
        raise ValueError(f"model.head={cfg.head.name} needs model.head.num_labels >= 1 "
                         f"(the data sets it in training), got {cfg.head.num_labels}.")


def projection_bias(cfg, default: bool) -> bool:
    """model.head.proj_bias, or the head's default when it is null."""
    return default if cfg.head.proj_bias is None else cfg.head.proj_bias


@register_head("classifier")
class ClassifierHead(TransformMixin, PoolingHead):
    """Sequence classification, as transformers' *ForSequenceClassification: pool (an encoder its first
    position, a decoder its last real token, or the mean of the real tokens; model.head.pool), the pooler
    dense + activation (encoders' default tanh as BERT/RoBERTa, relu is DistilBERT's; decoders' default
    none), the transform if model.head.dense (dense + activation + norm: ModernBERT's), dropout, then
    `proj` to num_labels (with a bias on an encoder; a decoder's `score` has none; model.head.proj_bias)."""

    def __init__(self, cfg, tokens: nn.Embedding | None = None, *, causal: bool = False) -> None:
        super().__init__()
        self.init_pooler(cfg, causal=causal, default_pooler="none" if causal else "tanh")
        self.init_transform(cfg, cfg.head.dense)
        self.drop = nn.Dropout(cfg.dropout)
        self.proj = nn.Linear(cfg.d_model, cfg.head.num_labels, bias=projection_bias(cfg, default=not causal))

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        check_transform(cfg)
        check_num_labels(cfg)

    @classmethod
    def label_classes(cls, cfg) -> int:
        return cfg.head.num_labels

    @classmethod
    def target_shape(cls, ids_shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(ids_shape[:1])  # (B,) one class id per sequence

    def forward(self, x: torch.Tensor, input_ids: torch.Tensor,
                attention_mask: torch.Tensor | None) -> torch.Tensor:
        pooled = self.transformed(self.pooled(x, input_ids, attention_mask))  # (B, C)
        return self.proj(self.drop(pooled))  # (B, num_labels)

    def outputs(self, x: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                logits_to_keep: int = 0) -> HeadOutput:
        self.no_logits_to_keep(logits_to_keep)
        return HeadOutput(logits=self(x, input_ids, attention_mask))

    def loss(self, out: HeadOutput, targets: Mapping[str, torch.Tensor], *, shift: bool) -> torch.Tensor:
        """Cross-entropy of the (B, num_labels) logits against the (B,) labels (-100: not counted)."""
        return masked_mean_ce(out.logits, targets["labels"], IGNORE_INDEX)


@register_head("token_classifier")
class TokenClassifierHead(TransformMixin, OutputHead):
    """Per-token classification (NER), as transformers' *ForTokenClassification: the transform if
    model.head.dense (ModernBERT's dense + activation + norm), dropout, then `proj` to num_labels at every
    position (with a bias unless model.head.proj_bias=false). Labels (B, T), -100 not counted (sub-tokens
    after a word's first, padding); no shift."""

    def __init__(self, cfg, tokens: nn.Embedding | None = None, *, causal: bool = False) -> None:
        super().__init__()
        self.init_transform(cfg, cfg.head.dense)
        self.drop = nn.Dropout(cfg.dropout)
        self.proj = nn.Linear(cfg.d_model, cfg.head.num_labels, bias=projection_bias(cfg, default=True))

    @classmethod
    def check_config(cls, cfg) -> None:
        check_transform(cfg)
        check_num_labels(cfg)

    @classmethod
    def label_classes(cls, cfg) -> int:
        return cfg.head.num_labels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.drop(self.transformed(x)))  # (B, T, C) -> (B, T, num_labels)

    def outputs(self, x: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                logits_to_keep: int = 0) -> HeadOutput:
        self.no_logits_to_keep(logits_to_keep)
        return HeadOutput(logits=self(x))

    def loss(self, out: HeadOutput, targets: Mapping[str, torch.Tensor], *, shift: bool) -> torch.Tensor:
        return masked_mean_ce(out.logits, targets["labels"], IGNORE_INDEX)
