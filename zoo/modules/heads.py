"""Output heads: vocabulary logits (LM / masked-LM) and sequence classification."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.modules.feedforward import plain_activation
from zoo.modules.norm import make_norm
from zoo.utils import IGNORE_INDEX


class LMHead(nn.Module):
    """(B, T, C) -> logits (B, T, V); softmax of these is the next-token (or masked-token) distribution.
    Optional BERT-style transform (dense, activation, norm) first; its activation is model.head_activation, by
    default the plain form of the FFN's (a SwiGLU FFN gives a SiLU transform); weight tied to the token table if
    asked; `model.head_scale` multiplies the projection's input (T5's tied head: d_model ** -0.5);
    `model.final_softcap` squashes the logits into (-c, c) with c * tanh(logits / c) (Gemma 2)."""

    def __init__(self, cfg, tokens: nn.Embedding) -> None:
        super().__init__()
        self.transform = None
        if cfg.head_transform:
            self.transform = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
            self.transform_norm = make_norm(cfg)
            self.activation = plain_activation(cfg.head_activation or cfg.activation)
        self.proj = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.head_bias)
        if cfg.tie_embeddings:
            self.proj.weight = tokens.weight
        self.scale = cfg.head_scale
        self.softcap = cfg.final_softcap

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.transform is not None:
            x = self.transform_norm(self.activation.fn(self.transform(x)))
        if self.scale is not None:
            x = x * self.scale
        logits = self.proj(x)  # (B, T, V)
        return logits if self.softcap is None else self.softcap * torch.tanh(logits / self.softcap)


class ClassifierHead(nn.Module):
    """Pool the first token (BERT's [CLS]; the data puts <bos> there), tanh dense, dropout, linear."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.pool = nn.Linear(cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.proj = nn.Linear(cfg.d_model, cfg.num_labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.drop(torch.tanh(self.pool(x[:, 0]))))  # (B, C) -> (B, num_labels)


def lm_loss(logits: torch.Tensor, labels: torch.Tensor, *, shift: bool, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Mean cross-entropy over positions whose label is not ignore_index; `shift` predicts token t+1 from
    position t (causal LM). A batch with no counted label gives 0, not NaN."""
    if shift:  # shift the labels, not the logits: slicing logits would copy (B, T, V)
        labels = F.pad(labels[:, 1:], (0, 1), value=ignore_index)
    total = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=ignore_index, reduction="sum"
    )
    return total / (labels != ignore_index).sum().clamp(min=1)
