"""Decoder-only causal model (GPT, Llama): embed -> causal stack -> the head model.head names (vocabulary
logits by default; none, a sequence classifier pooling the last real token, a token classifier, QA)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.config import ModelConfig
from zoo.models.base import ARCHS, ModelOutput, ZooModel
from zoo.modules.block import Stack
from zoo.modules.cache import KVCache
from zoo.modules.embedding import Embeddings
from zoo.modules.mtp import MultiTokenPredictor
from zoo.utils import IGNORE_INDEX


@ARCHS.register("decoder")
class DecoderLM(ZooModel):
    """`labels=input_ids` trains next-token prediction: the loss shifts internally (head=lm; the other heads'
    targets are as on an encoder: none is shifted)."""

    heads = None  # every registered head
    carries_mtp = True

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed = Embeddings(config, tokens)
        self.decoder_stack = Stack(config, config.n_layers)
        self.head = self.build_head(tokens, causal=True)
        self.mtp = MultiTokenPredictor(config) if config.mtp is not None else None  # model.mtp
        self.causal_lm = self.head.predicts_tokens
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        *,
        position_ids: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
        logits_to_keep: int = 0,
        document_ids: torch.Tensor | None = None,
        skip_head: bool = False,
        output_hidden_states: bool = False,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        output_mtp: bool | None = None,
    ) -> ModelOutput:
        """input_ids (B, T); attention_mask (B, past + T), 1 = real token; cache continues a sequence.
        `logits_to_keep=n` projects only the last n positions to the vocabulary (decoding needs 1).
        `document_ids` (B, T): packed documents, each attended and positioned as if alone.
        `skip_head=True` returns `hidden_states` only (logits None): for a loss that applies `self.head` a
        chunk at a time (zoo.modules.checkpointing.chunked_cross_entropy).
        `output_hidden_states=True` fills `all_hidden_states` (embedding output, then every layer's).
        `output_mtp` (model.mtp; None: while training, without a cache) fills `mtp_hidden_states`, each
        multi-token-prediction module's output for `self.head`; with `labels` their weighted loss
        (`self.mtp.loss`) is added to `loss`."""
        x, mask, terms = self.embed_and_mask(
            self.embed, input_ids, causal=True, start=cache.length if cache is not None else 0,
            attention_mask=attention_mask, position_ids=position_ids, token_type_ids=token_type_ids,
            document_ids=document_ids,
        )
        every: list[torch.Tensor] | None = [] if output_hidden_states else None
        x, self_w, _ = self.decoder_stack(x, mask, terms, cache=cache, need_weights=need_weights,
                                          hidden_states=every)
        every = None if every is None else tuple(every)
        if output_mtp is None:
            output_mtp = self.mtp is not None and self.training and cache is None
        if output_mtp and (self.mtp is None or cache is not None):
            raise ValueError("output_mtp=True needs model.mtp (multi-token prediction modules) and no cache: "
                             + ("this model has none." if self.mtp is None else "run it without one."))
        mtp = self.mtp(x, input_ids, self.embed, mask, terms) if output_mtp else None
        if cache is not None:
            cache.length += input_ids.shape[1]
        if skip_head:
            if labels is not None:
                raise ValueError("skip_head=True returns no logits, so it takes no labels (compute the loss "
                                 "from hidden_states with self.head)")
            return ModelOutput(logits=None, hidden_states=x, attentions=self_w, cache=cache,
                               all_hidden_states=every, mtp_hidden_states=mtp)
        head, loss = self.apply_head(
            x, input_ids, attention_mask,
            {"labels": labels, "start_positions": start_positions, "end_positions": end_positions},
            shift=True, logits_to_keep=logits_to_keep,
        )
        if loss is not None and mtp is not None:  # labels=input_ids: the next token of t is labels[t + 1]
            loss = loss + self.mtp.loss(mtp, self.head, F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX))
        return ModelOutput(**head.as_dict(), loss=loss, hidden_states=x, attentions=self_w, cache=cache,
                           all_hidden_states=every, mtp_hidden_states=mtp)
