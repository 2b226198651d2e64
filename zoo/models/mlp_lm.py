"""A Bengio-style neural language model (Bengio et al. 2003): the embeddings of a fixed window of the last
`context_size` tokens are concatenated and an MLP predicts the next token. No attention, no positions: the
rung of the ladder between the bigram table and self-attention (docs/ladder.md).

    (B, T) ids -> (B, T, C) embeddings -> windows of k = context_size: (B, T, k*C)
               -> Linear(k*C, d_ff) -> activation -> Linear(d_ff, C) -> LM head -> (B, T, V)

Position t sees tokens t-k+1 .. t; slots before the start of the sequence (or padding) are zero vectors."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.config import ModelConfig
from zoo.models.base import ARCHS, ModelOutput, ZooModel
from zoo.modules.embedding import Embeddings
from zoo.modules.feedforward import ACTIVATIONS
from zoo.modules.heads import LMHead, lm_loss


class ContextWindow:
    """What decoding needs to know of this model's reach: the last `context_size` tokens are all it reads,
    so the stepper crops the sequence to them (and keeps no KV cache)."""

    def __init__(self, size: int) -> None:
        self.max_positions = size
        self.stale_after = None  # a cache never goes stale (there is none)


@ARCHS.register("mlp_lm")
class MLPLanguageModel(ZooModel):
    """Next-token prediction from the concatenated embeddings of the last `context_size` tokens."""

    transformer = False  # no attention stack: n_layers, heads, wiring and the attention knobs do not apply

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        tokens = nn.Embedding(config.vocab_size, config.d_model)
        # positional must be 'none' (checked): the window is the order
        self.embed = Embeddings(config, tokens)
        k, c = config.context_size, config.d_model
        self.activation = ACTIVATIONS.get(config.activation)
        self.hidden = nn.Linear(k * c, config.ffn_dim, bias=config.bias)  # Bengio's H (and d)
        self.out = nn.Linear(config.ffn_dim, c, bias=config.bias)  # back to d_model: the head may be tied
        self.dropout = nn.Dropout(config.dropout)
        self.head = LMHead(config, tokens)
        self.init_weights()

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        super().check_config(cfg)
        if cfg.context_size < 1:
            raise ValueError(f"model.context_size={cfg.context_size}: arch 'mlp_lm' needs the number of "
                             "previous tokens it reads, an integer >= 1.")
        if cfg.positional.name != "none":
            raise ValueError(f"model.positional={cfg.positional.name}: arch 'mlp_lm' has no positions "
                             "(each slot of its window is its own weights); set model.positional=none.")
        if ACTIVATIONS.get(cfg.activation).gated:
            plain = ", ".join(n for n in ACTIVATIONS.names() if not ACTIVATIONS.get(n).gated)
            raise ValueError(f"model.activation={cfg.activation!r} is gated; arch 'mlp_lm' takes an ungated "
                             f"one ({plain}).")

    @property
    def positions(self) -> ContextWindow:
        return ContextWindow(self.config.context_size)

    def new_cache(self) -> None:
        """No KV cache: a step re-reads the last `context_size` tokens (cheap, and all the model uses)."""
        return None

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        *,
        position_ids: torch.Tensor | None = None,
        cache: None = None,
        need_weights: bool = False,
        logits_to_keep: int = 0,
        skip_head: bool = False,
        **_: object,
    ) -> ModelOutput:
        """input_ids (B, T); attention_mask (B, T), 0 = padding (read as 'nothing there'); position_ids are
        ignored (the window has no positions). `labels=input_ids` trains next-token prediction (shifted)."""
        if cache is not None:
            raise ValueError("arch 'mlp_lm' keeps no KV cache; decode with use_cache=False (generate does).")
        self.check_ids(input_ids)
        b, t = input_ids.shape
        self.check_mask(attention_mask, b, t)
        x = self.embed.tokens(input_ids)  # (B, T, C)
        if attention_mask is not None:
            x = x * attention_mask[..., None].to(x.dtype)  # padding reads as the zero 'before the start' slot
        k = self.config.context_size
        x = F.pad(x, (0, 0, k - 1, 0))  # (B, k-1+T, C): zeros before the first token
        windows = x.unfold(1, k, 1)  # (B, T, C, k): window t = positions t .. t+k-1 of the padded sequence
        windows = windows.transpose(2, 3).reshape(b, t, k * x.shape[-1])  # (B, T, k*C), oldest token first
        h = self.dropout(self.activation.fn(self.hidden(self.embed.drop(windows))))  # (B, T, d_ff)
        h = self.out(h)  # (B, T, C)
        if skip_head:
            return ModelOutput(logits=None, hidden_states=h)
        logits = self.head(h[:, -logits_to_keep:] if logits_to_keep else h)  # (B, T | n, V)
        loss = None
        if labels is not None:
            self.check_labels(labels, input_ids.shape)
            loss = lm_loss(logits, labels, shift=True)
        return ModelOutput(logits=logits, loss=loss, hidden_states=h)
