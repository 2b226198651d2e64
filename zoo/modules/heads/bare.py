"""head=none: a bare base model (transformers' BertModel, GPT2Model, LlamaModel): no output projection; the
model gives its last hidden states, and with a pooler (model.head.pooler) BertModel's `pooler_output`."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from zoo.modules.heads.base import HeadOutput, register_head
from zoo.modules.heads.pooling import NO_POOLER, PoolingHead


@register_head("none")
class BareHead(PoolingHead):
    """No tensors unless model.head.pooler names an activation: then `pool` (dense) + activation on the
    pooled position (model.head.pool: an encoder's first, a decoder's last real token) is `pooler_output`
    (BertModel: tanh(dense(x[:, 0])))."""

    targets = ()

    def __init__(self, cfg, tokens: nn.Embedding | None = None, *, causal: bool = False) -> None:
        super().__init__()
        self.init_pooler(cfg, causal=causal, default_pooler=NO_POOLER)

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        head = cfg.head
        if head.pool is not None and head.pooler in (None, NO_POOLER):
            raise ValueError(f"model.head.pool={head.pool!r} says where the pooler reads, but "
                             "model.head=none has no pooler; set model.head.pooler "
                             "(e.g. tanh, as BertModel) or drop head.pool.")

    def forward(self, x: torch.Tensor, input_ids: torch.Tensor,
                attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        return None if self.pool is None else self.pooled(x, input_ids, attention_mask)  # (B, C)

    def outputs(self, x: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                logits_to_keep: int = 0) -> HeadOutput:
        # not through __call__: a tracer's hook reads a head's output as logits
        self.no_logits_to_keep(logits_to_keep)
        return HeadOutput(pooler_output=None if self.pool is None
                          else self.pooled(x, input_ids, attention_mask))

    def loss(self, out: HeadOutput, targets: Mapping[str, torch.Tensor], *, shift: bool) -> torch.Tensor:
        raise ValueError("model.head=none has no output to score; it takes no labels.")
