"""head=lm: vocabulary logits for (masked / causal) language modelling, and the LM loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.modules.heads.base import HeadOutput, OutputHead, masked_mean_ce, register_head
from zoo.modules.heads.transform import TransformMixin, check_transform
from zoo.utils import IGNORE_INDEX


@register_head("lm")
class LMHead(TransformMixin, OutputHead):
    """(B, T, C) -> logits (B, T, V); softmax of these is the next-token (or masked-token) distribution.
    Optional BERT-style transform (dense, activation, norm) first; its activation is model.head.activation, by
    default the plain form of the FFN's (a SwiGLU FFN gives a SiLU transform); weight tied to the token table
    if asked; `model.head.scale` multiplies the projection's input (T5's tied head: d_model ** -0.5);
    `model.head.softcap` squashes the logits into (-c, c) with c * tanh(logits / c) (Gemma 2)."""

    predicts_tokens = True

    def __init__(self, cfg, tokens: nn.Embedding, *, causal: bool = True) -> None:
        super().__init__()
        self.init_transform(cfg, cfg.head.transform)
        self.proj = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.head.bias)
        if cfg.tie_embeddings:
            self.proj.weight = tokens.weight
        self.scale = cfg.head.scale
        self.softcap = cfg.head.softcap

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.transformed(x)
        if self.scale is not None:
            x = x * self.scale
        logits = self.proj(x)  # (B, T, V)
        return logits if self.softcap is None else self.softcap * torch.tanh(logits / self.softcap)

    @classmethod
    def check_config(cls, cfg) -> None:
        check_transform(cfg)

    @classmethod
    def label_classes(cls, cfg) -> int:
        """A token label is a vocabulary id."""
        return cfg.vocab_size

    def outputs(self, x: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                logits_to_keep: int = 0) -> HeadOutput:
        """`logits_to_keep=n` projects only the last n positions (decoding needs 1)."""
        return HeadOutput(logits=self(x[:, -logits_to_keep:] if logits_to_keep else x))  # (B, T | n, V)

    def loss(self, out: HeadOutput, targets, *, shift: bool) -> torch.Tensor:
        """Token labels (B, T), -100 ignored; shifted for a causal LM (labels=input_ids)."""
        return lm_loss(out.logits, targets["labels"], shift=shift)


def lm_loss(logits: torch.Tensor, labels: torch.Tensor, *, shift: bool,
            ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Mean cross-entropy over positions whose label is not ignore_index; `shift` predicts token t+1 from
    position t (causal LM). A batch with no counted label gives 0, not NaN."""
    if shift:  # shift the labels, not the logits: slicing logits would copy (B, T, V)
        labels = F.pad(labels[:, 1:], (0, 1), value=ignore_index)
    return masked_mean_ce(logits, labels, ignore_index)
