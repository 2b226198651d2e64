"""The keys of `model.mixer`, the token mixer every layer runs (zoo.modules.mixers.MIXERS builds it): one
settings class per mixer. Attention is the first; others (latent attention, linear recurrences, short
convolutions) register beside it. Head counts and sizes stay on the spine (`model.n_heads`, `n_kv_heads`,
`head_dim`): every mixer of the models zoo targets reads them, as transformers' configs keep them on top.

    mixer: {name: attention, qk_norm: true, sliding_window: 512}

Pure data; what the keys say with the rest of the config is checked by the mixer's `check_config`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from zoo.options import POSITIVE, Rule, integer, optional, positive_scale
from zoo.parts import Part, Parts

MIXER = Parts("mixer", default="attention")


@MIXER.register("attention")
@dataclass(frozen=True)
class AttentionSettings(Part):
    """Scaled dot-product attention over n_heads query heads and n_kv_heads key/value heads."""

    own_head_sizes: ClassVar[bool] = False  # heads of head_dim (null: d_model // n_heads, which must divide)

    qkv_bias: bool | None = None  # bias on the q/k/v projections only; null: `model.bias` (Qwen2: true)
    qk_norm: bool = False  # norm (model.norm) of q and k before RoPE (Qwen3, OLMo 2)
    qk_norm_scope: Literal["head", "all"] = "head"  # over each head's D features (Qwen3) | the whole q and k
    #                                                 projections, before the head split (OLMo 2)
    scale: Annotated[float | None, positive_scale()] = None  # score multiplier; null: 1/sqrt(head size)
    softcap: Annotated[float | None, positive_scale()] = None  # scores -> c tanh(scores / c) (Gemma 2)
    sinks: bool = False  # a learned logit per head joins each softmax's denominator (gpt-oss)
    output_gate: bool = False  # out * sigmoid(gate(x)) per head feature before o (Qwen3-Next / Qwen3.5's
    #                            gated attention: their q projection is doubled, [q_h | gate_h] per head)
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

    own_head_sizes: ClassVar[bool] = True  # its per-head sizes are its keys: n_heads need not divide d_model
    #                                        (GLM-4.7-Flash: 20 heads over 2048)

    q_lora_rank: Annotated[int | None, optional(POSITIVE, "a positive integer (or null: full-rank query)")] \
        = None  # the query's own latent (DeepSeek-V3 1536) with its norm; null: one full-rank projection
    kv_lora_rank: Annotated[int, POSITIVE] = 512  # the latent keys and values are decompressed from
    qk_nope_head_dim: Annotated[int, POSITIVE] = 128  # each head's q/k features without position
    qk_rope_head_dim: Annotated[int, _EVEN] = 64  # q features per head (the key's shared) that RoPE rotates
    v_head_dim: Annotated[int, POSITIVE] = 128  # each head's value size
    bias: bool | None = None  # bias on the down projections and o (transformers' attention_bias); null:
    #                           model.bias. The up projections never have one (the latent cache folds them)
    latent_norm_eps: Annotated[float | None, positive_scale()] = None  # the q and kv latents' norm epsilon;
    #   null: model.norm_eps (transformers' DeepSeek, GLM and Youtu keep 1e-6 whatever rms_norm_eps says)
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


_KERNEL = Rule(lambda v: integer(1).test(v), "an integer >= 1 (1: no convolution over past tokens)")


@MIXER.register("gated_deltanet")
@dataclass(frozen=True)
class GatedDeltaNetSettings(Part):
    """Gated DeltaNet (Qwen3-Next, Qwen3.5): a linear-attention recurrence of one (key x value) state per
    value head, after a short causal depthwise convolution of q/k/v; zoo.modules.gated_deltanet. Key names are
    transformers' Qwen3-Next ones; defaults: Qwen3-Next-80B-A3B's linear layers. Positions come from the
    recurrence (no RoPE), and the spine's n_heads / n_kv_heads / head_dim are attention's, not read here."""

    own_head_sizes: ClassVar[bool] = False  # the spine's heads are the attention layers' (hybrids)

    linear_num_key_heads: Annotated[int, POSITIVE] = 16  # q/k heads (each serves value_heads / key_heads)
    linear_num_value_heads: Annotated[int, POSITIVE] = 32  # value heads: one recurrent state each
    linear_key_head_dim: Annotated[int, POSITIVE] = 128  # q/k features per head (the state's rows)
    linear_value_head_dim: Annotated[int, POSITIVE] = 128  # v features per head (the state's columns)
    linear_conv_kernel_dim: Annotated[int, _KERNEL] = 4  # tokens the causal depthwise convolution reads
    chunk_size: Annotated[int, POSITIVE] = 64  # tokens per chunk of the chunked (training / prefill) form
    linear_allow_neg_eigval: bool = False  # beta = 2 sigmoid(b(x)) in [0, 2]: the state's transition may
    #   have negative eigenvalues (OLMo-hybrid: true); false: sigmoid(b(x)) in [0, 1] (Qwen3-Next, Qwen3.5)
    output_norm_eps: Annotated[float | None, positive_scale()] = None  # the gated output norm's epsilon;
    #   null: model.norm_eps (OLMo-hybrid fixes 1e-5, flash-linear-attention's default, whatever rms_norm_eps)
    norm_placement: str | None = None  # residual wiring (zoo.modules.residual.WIRINGS) of the layers that run
    #   this mixer; null: model.norm_placement (OLMo-hybrid: pre here, post_sublayer on its attention layers)

    def qkv_bias_or(self, bias: bool) -> bool:
        """Its projections have no bias (transformers' in_proj_* and out_proj), whatever model.bias says."""
        return False

    def rotary_head_size(self, head_size: int) -> int:
        """Asked only by a rotary scheme, which this mixer cannot carry (ValueError naming the key)."""
        raise ValueError(no_positions("gated_deltanet", "its recurrence", "rope"))


@MIXER.register("short_conv")
@dataclass(frozen=True)
class ShortConvSettings(Part):
    """LFM2's gated short convolution: x -> [B | C | h] by one projection, B*h through a causal depthwise
    convolution of conv_L_cache taps, times C, then out_proj; zoo.modules.short_conv. Key names are
    transformers' Lfm2 ones; defaults: LFM2-1.2B's. No heads and no positions (the convolution carries
    order); the spine's n_heads / n_kv_heads / head_dim are attention's, not read here."""

    own_head_sizes: ClassVar[bool] = False  # the spine's heads are the attention layers' (hybrids)

    conv_L_cache: Annotated[int, _KERNEL] = 3  # tokens the convolution reads: this one and L - 1 before
    conv_bias: bool = False  # a bias on in_proj, the convolution and out_proj (transformers' conv_bias)

    def qkv_bias_or(self, bias: bool) -> bool:
        """Its projections' bias is conv_bias, whatever model.bias says."""
        return self.conv_bias

    def rotary_head_size(self, head_size: int) -> int:
        """Asked only by a rotary scheme, which this mixer cannot carry (ValueError naming the key)."""
        raise ValueError(no_positions("short_conv", "its causal convolution", "rope"))


def no_positions(mixer: str, order: str, positional: str) -> str:
    """The refusal of a positional scheme that acts inside attention on an all-`mixer` stack (`order`: what
    carries token order there instead)."""
    return (f"model.positional={positional} acts inside attention (rotating q/k or biasing scores), which "
            f"model.mixer={mixer} does not have: {order} carries order. Choose model.positional=none (or one "
            f"that adds to the embeddings: learned, sinusoidal), or run {mixer} as model.linear_mixer beside "
            "attention layers.")
