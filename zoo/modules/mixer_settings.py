"""The keys of `model.mixer`, the token mixer every layer runs (zoo.modules.mixers.MIXERS builds it): one
settings class per mixer. Attention is the first; others (latent attention, linear recurrences, short
convolutions) register beside it. Head counts and sizes stay on the spine (`model.n_heads`, `n_kv_heads`,
`head_dim`): every mixer of the models zoo targets reads them, as transformers' configs keep them on top.

    mixer: {name: attention, qk_norm: true, sliding_window: 512}

Pure data; what the keys say with the rest of the config is checked by the mixer's `check_config`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from zoo.options import POSITIVE, optional, positive_scale
from zoo.parts import Part, Parts

MIXER = Parts("mixer", default="attention")


@MIXER.register("attention")
@dataclass(frozen=True)
class AttentionSettings(Part):
    """Scaled dot-product attention over n_heads query heads and n_kv_heads key/value heads."""

    qkv_bias: bool | None = None  # bias on the q/k/v projections only; null: `model.bias` (Qwen2: true)
    qk_norm: bool = False  # norm (model.norm) of q and k before RoPE (Qwen3, OLMo 2)
    qk_norm_scope: Literal["head", "all"] = "head"  # over each head's D features (Qwen3) | the whole q and k
    #                                                 projections, before the head split (OLMo 2)
    scale: Annotated[float | None, positive_scale()] = None  # score multiplier; null: 1/sqrt(head size)
    softcap: Annotated[float | None, positive_scale()] = None  # scores -> c tanh(scores / c) (Gemma 2)
    sinks: bool = False  # a learned logit per head joins each softmax's denominator (gpt-oss)
    sliding_window: Annotated[int | None, optional(POSITIVE, "a positive integer (or null: every layer "
                                                            "global)")] = None
    #   local layers (model.layer_pattern; all, if it says none) attend causally to themselves and W-1 keys
    #   before, bidirectionally to |i-j| <= W

    def qkv_bias_or(self, bias: bool) -> bool:
        return bias if self.qkv_bias is None else self.qkv_bias
