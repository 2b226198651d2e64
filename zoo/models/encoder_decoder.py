"""Encoder-decoder (the original Transformer): every decoder layer cross-attends to the encoder's final
output. Labels align with decoder positions; without decoder_input_ids they are labels shifted right."""

from __future__ import annotations

import torch
from torch import nn

from zoo.config import ModelConfig
from zoo.models.base import ARCHS, ModelOutput, ZooModel
from zoo.modules.block import Stack
from zoo.modules.cache import KVCache
from zoo.modules.embedding import Embeddings
from zoo.modules.mask import build_mask
from zoo.utils import IGNORE_INDEX


@ARCHS.register("encoder_decoder")
class EncoderDecoder(ZooModel):
    """Source -> encoder stack; target -> decoder stack that cross-attends to the encoder's top layer."""

    is_encoder_decoder = True
    bidirectional = True  # the encoder stack
    heads = ("lm", "none")  # vocabulary logits, or the bare model (T5Model): the decoder's hidden states

    @classmethod
    def check_depth(cls, cfg: ModelConfig) -> None:
        """Two stacks: encoder_layers and decoder_layers (each defaults to n_layers)."""
        if cfg.n_encoder_layers + cfg.n_decoder_layers == 0:
            raise ValueError("model.arch='encoder_decoder' needs at least one encoder or decoder layer.")

    @classmethod
    def depth(cls, cfg: ModelConfig) -> tuple[int, str]:
        """Both stacks' blocks; the keys that set them (encoder_layers / decoder_layers, else n_layers)."""
        named = [f"model.{k}={getattr(cfg, k)}" for k in ("encoder_layers", "decoder_layers")
                 if getattr(cfg, k) is not None]
        if len(named) < 2:
            named.insert(0, f"model.n_layers={cfg.n_layers}")
        return cfg.n_encoder_layers + cfg.n_decoder_layers, ", ".join(named)

    @property
    def positions(self):
        """The decoder's positional scheme (what generation extends)."""
        return self.tgt_embed.positional

    @property
    def decoder_embed(self) -> Embeddings:
        """The target embeddings (what generation extends)."""
        return self.tgt_embed

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        src_tokens = nn.Embedding(config.vocab_size, config.d_model)
        tgt_tokens = (src_tokens if config.share_embeddings
                      else nn.Embedding(config.vocab_size, config.d_model))
        self.src_embed = Embeddings(config, src_tokens)
        self.tgt_embed = Embeddings(config, tgt_tokens)
        self.encoder_stack = Stack(config, config.n_encoder_layers)
        self.decoder_stack = Stack(config, config.n_decoder_layers, cross=True)
        self.head = self.build_head(tgt_tokens, causal=True)
        self.init_weights()

    def shift_right(self, labels: torch.Tensor) -> torch.Tensor:
        """[y1, y2, ..., yn] -> [start, y1, ..., y(n-1)] (ignored labels become pads)."""
        shifted = labels.new_full(labels.shape, self.config.start_id)
        shifted[:, 1:] = labels[:, :-1].masked_fill(labels[:, :-1] == IGNORE_INDEX, self.config.pad_id)
        return shifted

    def encode(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
        need_weights: bool = False, hidden_states: list[torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, list]:
        """Source ids (B, S) -> memory (B, S, C) and per-layer encoder self-attention weights
        (`hidden_states`: a list that receives every layer's input and the final output, see Stack)."""
        x, mask, terms = self.embed_and_mask(self.src_embed, input_ids, causal=False,
                                             attention_mask=attention_mask)
        memory, self_w, _ = self.encoder_stack(x, mask, terms, need_weights=need_weights,
                                               hidden_states=hidden_states)
        return memory, self_w

    def decode(
        self,
        decoder_input_ids: torch.Tensor,
        memory: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        decoder_attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
        logits_to_keep: int = 0,
    ) -> tuple[torch.Tensor | None, torch.Tensor, list, list]:
        """Target ids (B, T) attending to memory (B, S, C) -> (logits (B, T, V), hidden, self_w, cross_w).
        `attention_mask` is the source padding mask; pads in the source are never attended.
        `logits_to_keep=n` projects only the last n positions to the vocabulary (decoding needs 1)."""
        x, self_w, cross_w = self.decoder_states(
            decoder_input_ids, memory, attention_mask, decoder_attention_mask=decoder_attention_mask,
            position_ids=position_ids, cache=cache, need_weights=need_weights,
        )
        out = self.head.outputs(x, decoder_input_ids, decoder_attention_mask, logits_to_keep)
        return out.logits, x, self_w, cross_w

    def decoder_states(
        self,
        decoder_input_ids: torch.Tensor,
        memory: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        decoder_attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
        hidden_states: list[torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, list, list]:
        """The decoder stack alone: target ids (B, T) -> (hidden (B, T, C), self_w, cross_w)."""
        t = decoder_input_ids.shape[1]
        x, self_mask, terms = self.embed_and_mask(
            self.tgt_embed, decoder_input_ids, causal=True, start=cache.length if cache is not None else 0,
            attention_mask=decoder_attention_mask, position_ids=position_ids, name="decoder_input_ids",
        )
        self.check_mask(attention_mask, memory.shape[0], memory.shape[1])  # source padding (B, S)
        cross_mask = build_mask(self.padding_mask(attention_mask), causal=False, q_len=t,
                                k_len=memory.shape[1])
        x, self_w, cross_w = self.decoder_stack(
            x, self_mask, terms, memory=memory, memory_mask=cross_mask, cache=cache,
            need_weights=need_weights, hidden_states=hidden_states,
        )
        if cache is not None:
            cache.length += t
        return x, self_w, cross_w

    def forward(
        self,
        input_ids: torch.Tensor,
        decoder_input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        *,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
        output_hidden_states: bool = False,
    ) -> ModelOutput:
        """`output_hidden_states=True` fills `all_hidden_states` (the decoder's: embedding output, then every
        layer's) and, when the encoder runs here, `encoder_all_hidden_states`."""
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("encoder_decoder needs decoder_input_ids or labels (to shift right).")
            decoder_input_ids = self.shift_right(labels)
        enc_w: list = []
        enc_every: list[torch.Tensor] | None = None
        if encoder_hidden_states is None:
            enc_every = [] if output_hidden_states else None
            encoder_hidden_states, enc_w = self.encode(input_ids, attention_mask, need_weights=need_weights,
                                                       hidden_states=enc_every)
        every: list[torch.Tensor] | None = [] if output_hidden_states else None
        x, self_w, cross_w = self.decoder_states(
            decoder_input_ids, encoder_hidden_states, attention_mask,
            decoder_attention_mask=decoder_attention_mask, cache=cache, need_weights=need_weights,
            hidden_states=every,
        )
        head, loss = self.apply_head(x, decoder_input_ids, decoder_attention_mask, {"labels": labels},
                                     shift=False)
        return ModelOutput(
            **head.as_dict(), loss=loss, hidden_states=x, attentions=self_w, cross_attentions=cross_w,
            encoder_hidden_states=encoder_hidden_states, encoder_attentions=enc_w, cache=cache,
            all_hidden_states=None if every is None else tuple(every),
            encoder_all_hidden_states=None if enc_every is None else tuple(enc_every),
        )
