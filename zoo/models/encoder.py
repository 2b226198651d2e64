"""Encoder-only bidirectional model (BERT): embed -> bidirectional stack -> the head model.head names
(masked-LM logits, none, a sequence / token classifier, extractive QA)."""

from __future__ import annotations

import torch
from torch import nn

from zoo.config import ModelConfig
from zoo.models.base import ARCHS, ModelOutput, ZooModel
from zoo.modules.block import Stack
from zoo.modules.embedding import Embeddings


@ARCHS.register("encoder")
class EncoderModel(ZooModel):
    """Masked-LM labels are -100 except at masked positions; a classifier's labels are (B,) class ids, a token
    classifier's (B, T); qa takes start_positions and end_positions (B,)."""

    self_stream = "encoder"
    bidirectional = True
    heads = None  # every registered head

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed = Embeddings(config, tokens)
        self.encoder_stack = Stack(config, config.n_layers)
        self.head = self.build_head(tokens, causal=False)
        self.init_weights()

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
        output_hidden_states: bool = False,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
    ) -> ModelOutput:
        """`document_ids` (B, T): packed documents, each attended and positioned as if alone.
        `output_hidden_states=True` fills `all_hidden_states` (embedding output, then every layer's)."""
        x, mask, terms = self.embed_and_mask(
            self.embed, input_ids, causal=False, attention_mask=attention_mask, position_ids=position_ids,
            token_type_ids=token_type_ids, document_ids=document_ids,
        )
        every: list[torch.Tensor] | None = [] if output_hidden_states else None
        x, self_w, _ = self.encoder_stack(x, mask, terms, need_weights=need_weights, hidden_states=every)
        head, loss = self.apply_head(
            x, input_ids, attention_mask,
            {"labels": labels, "start_positions": start_positions, "end_positions": end_positions},
            shift=False,
        )
        return ModelOutput(**head.as_dict(), loss=loss, hidden_states=x, attentions=self_w,
                           all_hidden_states=None if every is None else tuple(every))
