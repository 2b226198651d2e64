"""Encoder-only bidirectional model (BERT): masked-LM logits or a sequence-classification head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.config import ModelConfig
from zoo.models.base import ARCHS, ModelOutput, ZooModel
from zoo.modules.block import Stack
from zoo.modules.embedding import Embeddings
from zoo.modules.heads import ClassifierHead, LMHead, lm_loss


@ARCHS.register("encoder")
class EncoderModel(ZooModel):
    """Masked-LM labels are -100 except at masked positions; classifier labels are (B,) class ids."""

    self_stream = "encoder"

    @classmethod
    def check_head(cls, cfg: ModelConfig) -> None:
        """An encoder may carry a classifier head, which needs its label count (the data gives it in training)."""
        if cfg.head == "classifier" and cfg.num_labels < 1:
            raise ValueError("model.head='classifier' needs model.num_labels >= 1.")

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed = Embeddings(config, tokens)
        self.encoder_stack = Stack(config, config.n_layers)
        self.head = ClassifierHead(config) if config.head == "classifier" else LMHead(config, tokens)
        self.init_weights()

    @property
    def label_classes(self) -> int:
        """A sequence classifier's labels are its classes; a token head's are the vocabulary."""
        return self.config.num_labels if self.config.head == "classifier" else self.config.vocab_size

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        *,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        need_weights: bool = False,
        document_ids: torch.Tensor | None = None,
    ) -> ModelOutput:
        """`document_ids` (B, T): packed documents, each attended and positioned as if alone."""
        x, mask, terms = self.embed_and_mask(
            self.embed, input_ids, causal=False, attention_mask=attention_mask, position_ids=position_ids,
            token_type_ids=token_type_ids, document_ids=document_ids,
        )
        x, self_w, _ = self.encoder_stack(x, mask, terms, need_weights=need_weights)
        logits = self.head(x)  # (B, T, V) or (B, num_labels)
        loss = None
        if labels is not None:
            if self.config.head == "classifier":
                self.check_labels(labels, input_ids.shape[:1])
                loss = F.cross_entropy(logits.float(), labels)
            else:
                self.check_labels(labels, input_ids.shape)
                loss = lm_loss(logits, labels, shift=False)
        return ModelOutput(logits=logits, loss=loss, hidden_states=x, attentions=self_w)
