"""The optional transform before a head's projection: dense, activation (model.head.activation, by default
the ungated form of the FFN's), then the configured norm. The LM head runs it when model.head.transform
(BERT's masked-LM head); the classifier, token_classifier and qa heads when model.head.dense (ModernBERT runs
it before every classifier: on the pooled vector, or at every position). Tensors `head.transform.*`,
`head.transform_norm.*`."""

from __future__ import annotations

import torch
from torch import nn

from zoo.modules.feedforward import ACTIVATIONS, plain_activation
from zoo.modules.norm import make_norm
from zoo.registry import unknown_choice_message


def check_transform(cfg) -> None:
    """The transform's activation applies only when the transform is on, and alone, so it must be ungated."""
    activation = cfg.head.activation
    if activation is None:
        return
    if activation not in ACTIVATIONS:
        raise ValueError("model.head.activation: "
                         + unknown_choice_message("activation", activation, ACTIVATIONS.names()))
    if ACTIVATIONS.get(activation).gated:
        plain = [n for n in ACTIVATIONS.names() if not ACTIVATIONS.get(n).gated]
        raise ValueError(f"model.head.activation={activation!r} is gated; the head transform "
                         f"takes an ungated one: {', '.join(plain)} "
                         "(default: the ungated form of model.activation).")
    switch = "transform" if hasattr(cfg.head, "transform") else "dense"  # the lm head's key, the others'
    if not getattr(cfg.head, switch):
        raise ValueError(f"model.head.activation={activation!r} is the activation of the head's transform, "
                         f"which is off: set model.head.{switch}=true to use it, or leave activation null.")


class TransformMixin:
    """Gives a head `transform`, `transform_norm` and `activation` when `on` (the head's key) is set."""

    def init_transform(self, cfg, on: bool) -> None:
        self.transform = None
        if on:
            self.transform = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
            self.transform_norm = make_norm(cfg)
            self.activation = plain_activation(cfg.head.activation or cfg.activation)

    def transformed(self, x: torch.Tensor) -> torch.Tensor:
        """(..., C) -> (..., C): norm(activation(dense(x))), or x without a transform."""
        if self.transform is None:
            return x
        return self.transform_norm(self.activation.fn(self.transform(x)))
