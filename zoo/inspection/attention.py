"""Attention weights for one input, every layer and head, read from the model's own weights-returning
path (`need_weights=True`), grouped by kind: encoder self, decoder self, decoder-to-encoder cross."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from zoo.utils import eval_mode


@dataclass
class AttentionMaps:
    """`maps[kind][layer]` is (B, H, Tq, Tk); `tokens[stream]` labels the positions of each stream.
    Kinds: "encoder" and "decoder" (self-attention), "cross" (decoder queries, encoder keys)."""

    maps: dict[str, list[torch.Tensor]]
    tokens: dict[str, list[str]] = field(default_factory=dict)

    def axes(self, kind: str) -> tuple[list[str] | None, list[str] | None]:
        """(query labels, key labels) for a kind."""
        queries, keys = streams(kind)
        return self.tokens.get(queries), self.tokens.get(keys)

    def kinds(self) -> list[str]:
        return list(self.maps)


def streams(kind: str) -> tuple[str, str]:
    """(query stream, key stream) of an attention kind: cross-attention's decoder queries see encoder keys."""
    return ("decoder", "encoder") if kind == "cross" else (kind, kind)


def token_labels(ids: list[int], tokenizer: Any = None) -> list[str]:
    """Readable labels for a plot axis: the tokenizer's token strings when it has them, else the ids."""
    hf = getattr(tokenizer, "hf", tokenizer)
    if hf is not None and hasattr(hf, "id_to_token"):
        return [(hf.id_to_token(i) or str(i)).replace("Ġ", "·").replace("Ċ", "\\n") for i in ids]
    return [str(i) for i in ids]


def attention_maps(
    model: nn.Module,
    input_ids: torch.Tensor,
    *,
    tokens: Sequence[str] | None = None,
    decoder_tokens: Sequence[str] | None = None,
    **forward_kwargs: Any,
) -> AttentionMaps:
    """Run `model(input_ids, need_weights=True, **forward_kwargs)` in eval mode without gradients and
    collect every layer's weights. `tokens` label input_ids, `decoder_tokens` the decoder input."""
    with eval_mode(model), torch.no_grad():
        out = model(input_ids, need_weights=True, **forward_kwargs)
    self_kind = getattr(model, "self_stream", "decoder")  # what out.attentions belong to
    fields = {"encoder": out.encoder_attentions, self_kind: out.attentions, "cross": out.cross_attentions}
    maps = {kind: [w.detach() for w in ws] for kind, ws in fields.items()
            if ws and all(w is not None for w in ws)}
    labels: dict[str, list[str]] = {}
    source_stream = "encoder" if out.encoder_attentions or self_kind == "encoder" else "decoder"
    if tokens is not None:
        labels[source_stream] = list(tokens)
    if decoder_tokens is not None:
        labels["decoder"] = list(decoder_tokens)
    return AttentionMaps(maps, labels)
