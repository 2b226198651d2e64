"""head=qa: extractive question answering, as transformers' *ForQuestionAnswering: one Linear(d, 2) gives
every token a start and an end logit; the answer is the span between the best start and end."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from zoo.modules.heads.base import HeadOutput, OutputHead, masked_mean_ce, register_head
from zoo.modules.heads.classifier import projection_bias
from zoo.modules.heads.transform import TransformMixin, check_transform


@register_head("qa")
class QuestionAnsweringHead(TransformMixin, OutputHead):
    """The transform if model.head.dense (ModernBERT's dense + activation + norm), then `proj`
    (B, T, C) -> (B, T, 2): logits[..., 0] are the start logits, logits[..., 1] the end logits
    (bias unless model.head.proj_bias=false). Targets: start_positions, end_positions (B,), token indices;
    the loss is the mean of the two cross-entropies, a position >= T not counted (transformers clamps to T and
    ignores T: an answer cut off by truncation); a negative position is refused."""

    targets = ("start_positions", "end_positions")

    def __init__(self, cfg, tokens: nn.Embedding | None = None, *, causal: bool = False) -> None:
        super().__init__()
        self.init_transform(cfg, cfg.head.dense)
        self.proj = nn.Linear(cfg.d_model, 2, bias=projection_bias(cfg, default=True))

    @classmethod
    def check_config(cls, cfg) -> None:
        check_transform(cfg)

    @classmethod
    def target_shape(cls, ids_shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(ids_shape[:1])  # (B,) one token index per sequence

    @classmethod
    def check_target_values(cls, cfg, targets: Mapping[str, torch.Tensor]) -> None:
        for name, value in targets.items():
            if bool((value < 0).any()):
                raise ValueError(f"{name} hold {int(value.min())}; a position is a token index >= 0 "
                                 "(one at or past the sequence length is "
                                 "not counted: an answer truncated away).")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.transformed(x))  # (B, T, C) -> (B, T, 2)

    def outputs(self, x: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                logits_to_keep: int = 0) -> HeadOutput:
        self.no_logits_to_keep(logits_to_keep)
        logits = self(x)
        # (B, T) each
        return HeadOutput(logits=logits, start_logits=logits[..., 0], end_logits=logits[..., 1])

    def loss(self, out: HeadOutput, targets: Mapping[str, torch.Tensor], *, shift: bool) -> torch.Tensor:
        t = out.start_logits.shape[1]
        start, end = (targets[k].clamp(0, t) for k in self.targets)  # t: past the end, not counted
        return (masked_mean_ce(out.start_logits, start, t) + masked_mean_ce(out.end_logits, end, t)) / 2
