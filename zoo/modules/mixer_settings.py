"""The keys of `model.mixer`, the token mixer every layer runs (zoo.modules.mixers.MIXERS builds it): one
settings class per mixer. Attention is the first; others (latent attention, linear recurrences, short
convolutions) register beside it. Head counts and sizes stay on the spine (`model.n_heads`, `n_kv_heads`,
`head_dim`): every mixer of the models zoo targets reads them, as transformers' configs keep them on top.

    mixer: {name: attention, qk_norm: true, sliding_window: 512}

Pure data; what the keys say with the rest of the config is checked by the mixer's `check_config`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from zoo.options import POSITIVE, Rule, integer, optional, positive_scale
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

    def rotary_head_size(self, head_size: int) -> int:
        """The features of each q/k head that RoPE may rotate: the whole head."""
        return head_size


_WINDOW = optional(POSITIVE, "a positive integer (or null: every layer global)")
_EVEN = Rule(lambda v: integer(2).test(v) and v % 2 == 0, "an even integer >= 2 (RoPE rotates pairs)")


@MIXER.register("mla")
@dataclass(frozen=True)
class LatentAttentionSettings(Part):
    """Multi-head Latent Attention (DeepSeek-V2/V3): keys and values decompressed per head from one
    kv_lora_rank latent per token, plus a qk_rope_head_dim key shared by the heads that carries RoPE;
    zoo.modules.mla. Defaults: DeepSeek-V2-Lite's per-head sizes."""

    q_lora_rank: Annotated[int | None, optional(POSITIVE, "a positive integer (or null: full-rank query)")] \
        = None  # the query's own latent (DeepSeek-V3 1536) with its norm; null: one full-rank projection
    kv_lora_rank: Annotated[int, POSITIVE] = 512  # the latent keys and values are decompressed from
    qk_nope_head_dim: Annotated[int, POSITIVE] = 128  # each head's q/k features without position
    qk_rope_head_dim: Annotated[int, _EVEN] = 64  # q features per head (the key's shared) that RoPE rotates
    v_head_dim: Annotated[int, POSITIVE] = 128  # each head's value size
    bias: bool | None = None  # bias on the down projections and o (transformers' attention_bias); null:
    #                           model.bias. The up projections never have one (the latent cache folds them)
    scale: Annotated[float | None, positive_scale()] = None  # score multiplier; null: 1/sqrt(nope + rope),
    #                                                          times YaRN's mscale_all_dim factor squared
    sliding_window: Annotated[int | None, _WINDOW] = None  # as attention's: the window of the local layers
    cache: Literal["latent", "materialised"] = "latent"  # what decoding keeps per token and layer: the latent
    #   and the rope key (kv_b folded into query and output), or each head's keys and values (transformers)

    def qkv_bias_or(self, bias: bool) -> bool:
        return bias if self.bias is None else self.bias

    def rotary_head_size(self, head_size: int) -> int:
        """Only the rope part of each head rotates."""
        return self.qk_rope_head_dim
