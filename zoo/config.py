"""ModelConfig: the one plain-data description of a model. Every knob is a flat field (the YAML, Hydra,
checkpoint and export surface); derived sizes are properties.

Config is data: it imports no module it configures. MODEL_OPTIONS holds the rules of the keys no registry
entry owns; the keys a chosen entry reads (a positional scheme's rope_*, a head's num_labels) are declared by
that entry. Both are checked in one pass when the model is built (`zoo.models.check_config`, docs/design.md
"Config vocabulary"); constructing or replacing a config checks nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from zoo.options import (
    BOOL,
    COUNT,
    NAME,
    POSITIVE,
    SWITCH,
    Options,
    integer,
    number,
    one_of,
    optional,
    positive_scale,
    within,
)
from zoo.utils import did_you_mean, plain_dict


@dataclass
class ModelConfig:
    """Hyper-parameters of one Transformer. Key names are the public config surface (YAML, Hydra, API)."""

    arch: str = "decoder"  # encoder | decoder | encoder_decoder
    vocab_size: int = 256
    d_model: int = 128
    n_layers: int = 2
    encoder_layers: int | None = None  # encoder_decoder only; default n_layers
    decoder_layers: int | None = None
    n_heads: int = 4
    n_kv_heads: int | None = None  # grouped-query attention; default n_heads (1 = multi-query)
    head_dim: int | None = None  # per-head size; default d_model // n_heads (Gemma, Qwen3 set it apart)
    qkv_bias: bool | None = None  # bias on the q/k/v projections only;
                                  # default `bias` (Qwen2: true, bias false)
    qk_norm: bool = False  # norm (model.norm) of q and k before RoPE (Qwen3, OLMo 2)
    qk_norm_scope: str = "head"  # qk_norm over each head's D features (Qwen3) | all: over the whole q and
                                 # k projections, before the head split (OLMo 2)
    attn_scale: float | None = None  # score multiplier; default 1/sqrt(head size) (T5: 1.0)
    attn_softcap: float | None = None  # scores -> c * tanh(scores / c) before the mask (Gemma 2)
    attn_sinks: bool = False  # a learned logit per head joins each softmax's denominator (gpt-oss)
    final_softcap: float | None = None  # logits -> c * tanh(logits / c) (Gemma 2)
    head_scale: float | None = None  # LM head input multiplier (T5 with a tied head: d_model ** -0.5)
    sliding_window: int | None = None  # local layers: causal, self + W-1 keys
                                       # before; bidirectional, |i-j| <= W
    global_every: int = 0  # with sliding_window: every k-th layer (k,
                           # 2k, ...) attends globally; 0 = none does
    global_first: bool = False  # with global_every: layers 0, k, 2k, ... are the global ones (ModernBERT)
    ffn: str = "mlp"  # mlp | moe | none (zoo.modules.feedforward.FFNS)
    moe: dict[str, Any] = dataclasses.field(default_factory=dict)  # ffn=moe: its keys (n_experts, top_k,
    #   router, balance, ...), declared and checked by zoo.modules.moe.settings.MoESettings; empty otherwise
    context_size: int = 0  # arch mlp_lm: tokens its MLP reads (the
                           # current one and k-1 before); others: unused
    ffn_ratio: float = 4.0  # d_ff = ffn_ratio * d_model unless d_ff is given
    d_ff: int | None = None
    activation: str = "gelu"  # relu | gelu | gelu_tanh | silu | swiglu | geglu
    head_activation: str | None = None  # head transform (head_transform / head_dense); default: the ungated
    #                                     form of `activation`
    norm: str = "layernorm"  # layernorm | rmsnorm | none
    norm_eps: float = 1e-5
    norm_placement: str = "pre"  # residual wiring: pre | post | sandwich | parallel
    final_norm: bool | None = None  # default: the wiring's (True for pre/sandwich/parallel, False for post)
    first_attn_norm: bool = True  # False: layer 0's attention norm is the identity (ModernBERT: the
                                  # embedding norm right before it does that job)
    embed_norm: bool = False  # a norm right after the embeddings (BERT, BART)
    embed_scale: bool = False  # multiply token embeddings by sqrt(d_model) (Vaswani, Marian)
    residual: bool = True  # False drops the residual connections (minimal attention-only models)
    positional: str = "learned"  # sinusoidal | learned | rope | alibi | t5_relative | none
    pos_offset: int = 0  # learned table index offset (BART uses 2)
    pos_skip_pads: bool = False  # learned: positions count real tokens only
                                 # (the mask); pads read row pad_id (RoBERTa)
    sinusoidal_layout: str = "interleaved"  # interleaved (paper: sin, cos, sin, ...) | half (sin..., cos...)
    rope_base: float = 10000.0
    rope_local_base: float | None = None  # rope: base of the sliding-window layers, unscaled (Gemma 3: 1e4;
                                          # rope_scaling then acts on the global ones); null: rope_base
    rope_layout: str = "half"  # half (rotate-half, GPT-NeoX/Llama) | interleaved (pairs, RoFormer/GPT-J)
    rope_fraction: float = 1.0  # share of each head's features that rotate
                                # (GPT-NeoX 0.25, Phi-2 0.4); rest pass
    nope_every: int = 0  # rope: every k-th layer (k, 2k, ...) does not rotate (SmolLM3: 4); 0 = all rotate
    rope_scaling: str = "none"  # frequency scaling for a longer context: none | linear | llama3 | yarn |
                                # longrope
    rope_factor: float = 1.0  # rope_scaling linear / llama3 / yarn: how far the context is stretched
    rope_low_freq_factor: float = 1.0  # llama3: wavelengths > rope_original_max_len
                                       # / this are divided by rope_factor
    rope_high_freq_factor: float = 4.0  # llama3: wavelengths < rope_original_max_len / this are kept
    rope_truncate: bool = True  # yarn: the ramp's ends rounded out to whole pairs (gpt-oss: false)
    rope_original_max_len: int | None = None  # llama3 / yarn / longrope: the context length the model was
                                              # pretrained at
    rope_short_factor: list[float] | None = None  # longrope: one divisor per rotated pair's frequency while
                                                  # the sequence fits in rope_original_max_len
    rope_long_factor: list[float] | None = None  # longrope: the same, for a sequence longer than that
    rel_buckets: int = 32  # t5_relative: distance buckets (half per direction in a bidirectional stack)
    rel_max_distance: int = 128  # t5_relative: distances beyond this share the last bucket
    max_seq_len: int = 256
    dropout: float = 0.0
    attn_dropout: float | None = None  # default: dropout
    bias: bool = True  # biases in linear layers and LayerNorm
    head_bias: bool = False  # bias on the vocabulary projection (BERT, BART's final_logits_bias)
    head_transform: bool = False  # dense + activation + norm before the vocabulary projection (BERT MLM)
    tie_embeddings: bool = True  # output projection shares the (decoder) token embedding
    share_embeddings: bool = True  # encoder_decoder: one token table for source and target
    type_vocab_size: int = 0  # token-type (segment) embeddings, BERT; 0 = none
    head: str = "lm"  # output head (zoo.modules.heads.HEADS): lm | none | classifier | token_classifier | qa
    num_labels: int = 0  # classifier / token_classifier: label count (the data sets it in training)
    head_pool: str | None = None  # classifier, none's pooler: first | last | mean;
                                  # null: first (encoder), last (decoder)
    head_pooler: str | None = None  # dense + activation on the pooled position: tanh | relu | ... | none;
    #                                 null: classifier tanh on an encoder (BERT), none on a decoder; none:
    #                                 none
    head_dense: bool = False  # classifier / token_classifier / qa: dense + activation + norm before the
    #                           projection (ModernBERT's)
    head_proj_bias: bool | None = None  # classifier / token_classifier / qa
                                        # projection bias; null: true, except
    #                                     a decoder's classifier (transformers' `score` has none)
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    decoder_start_id: int | None = None  # encoder_decoder: first decoder token; default bos_id
    init_std: float = 0.02

    # ----- derived sizes -----
    @property
    def head_size(self) -> int:
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    def layer_is_local(self, index: int) -> bool:
        """Whether layer `index` (0-based, within its stack) uses the sliding window (Mistral: all; Gemma 2,
        global_every=2: layers 0, 2, 4, ...; ModernBERT, global_every=3 and global_first: all but 0, 3,
        ...)."""
        if self.sliding_window is None:
            return False
        if not self.global_every:
            return True
        return index % self.global_every != (0 if self.global_first else self.global_every - 1)

    def layer_rotates(self, index: int) -> bool:
        """Whether layer `index` applies the rotary terms
        (SmolLM3, nope_every=4: all but layers 3, 7, ...)."""
        return not (self.nope_every and (index + 1) % self.nope_every == 0)

    @property
    def use_qkv_bias(self) -> bool:
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def ffn_dim(self) -> int:
        return self.d_ff if self.d_ff is not None else int(round(self.ffn_ratio * self.d_model))

    @property
    def n_encoder_layers(self) -> int:
        return self.n_layers if self.encoder_layers is None else self.encoder_layers

    @property
    def n_decoder_layers(self) -> int:
        return self.n_layers if self.decoder_layers is None else self.decoder_layers

    @property
    def attention_dropout(self) -> float:
        return self.dropout if self.attn_dropout is None else self.attn_dropout

    @property
    def start_id(self) -> int:
        return self.bos_id if self.decoder_start_id is None else self.decoder_start_id

    # ----- conversion -----
    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | ModelConfig) -> ModelConfig:
        """Build from a dict / OmegaConf node / ModelConfig; an unknown key raises with a close match."""
        if isinstance(data, ModelConfig):
            return dataclasses.replace(data)
        data = plain_dict(data, "model", expected=MODEL_SPEC)
        data.pop("defaults", None)  # a Hydra group file's defaults list is not a model field
        known = [f.name for f in fields(cls)]
        for key in data:
            if key not in known:
                hint = did_you_mean(key, known)
                raise ValueError(f"Unknown model config key {key!r}.{hint} Known keys: {', '.join(known)}.")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (no OmegaConf, no tensors): safe to store in checkpoints and JSON."""
        return dataclasses.asdict(self)


MODEL_SPEC = "a preset name, mapping or ModelConfig"  # what `model` may be, in error messages


FRACTION = within(number(), lambda v: 0 <= v < 1, "in [0, 1)")

# The keys no registry entry owns, and their rules. The keys a named choice's entry reads (a positional
# scheme's, a RoPE scaling's, a head's) are declared by that entry (its `options`) and checked with these by
# zoo.models.vocabulary.check_config, once per config: config is data and imports no module it configures.
MODEL_OPTIONS = Options({
    **{key: NAME for key in ("arch", "ffn", "activation", "norm", "norm_placement", "positional", "head")},
    **{key: POSITIVE for key in ("vocab_size", "d_model", "n_heads", "max_seq_len")},
    **{key: COUNT for key in ("n_layers", "type_vocab_size", "global_every", "context_size")},
    **{key: optional(COUNT) for key in ("encoder_layers", "decoder_layers")},
    **{key: BOOL for key in ("qk_norm", "attn_sinks", "global_first", "first_attn_norm", "embed_norm",
                             "embed_scale", "residual", "bias", "share_embeddings")},
    **{key: SWITCH for key in ("qkv_bias", "final_norm")},
    **{key: optional(integer()) for key in ("pad_id", "bos_id", "eos_id", "decoder_start_id")},
    "n_kv_heads": optional(POSITIVE),
    "head_dim": optional(POSITIVE, "a positive integer (or null for d_model // n_heads)"),
    "sliding_window": optional(POSITIVE, "a positive integer (or null: every layer global)"),
    "qk_norm_scope": one_of("head", "all"),
    "attn_scale": positive_scale(), "attn_softcap": positive_scale(),
    "ffn_ratio": number(), "d_ff": optional(integer()),
    "norm_eps": within(number(), lambda v: v > 0, "> 0"),
    "dropout": FRACTION, "attn_dropout": optional(FRACTION),
    "init_std": within(number(), lambda v: v >= 0, ">= 0"),
})


def check_sizes(cfg: ModelConfig) -> None:
    """What the fields say together: heads divide the width, token ids lie in the vocabulary (ValueError)."""
    if cfg.head_dim is None and cfg.d_model % cfg.n_heads:
        raise ValueError(f"model.d_model={cfg.d_model} is not divisible by model.n_heads={cfg.n_heads}; "
                         "choose n_heads among the divisors of d_model, or set model.head_dim.")
    if cfg.n_heads % cfg.kv_heads:
        raise ValueError(f"model.n_heads={cfg.n_heads} is not divisible by "
                         f"model.n_kv_heads={cfg.n_kv_heads}; n_kv_heads must divide n_heads (n_heads = MHA, "
                         "1 = MQA).")
    if cfg.ffn_dim < 1 and cfg.ffn != "none":
        raise ValueError(f"model.d_ff/ffn_ratio give a hidden size of {cfg.ffn_dim}; it must be >= 1.")
    for key in ("pad_id", "bos_id", "eos_id", "decoder_start_id"):
        value = getattr(cfg, key)
        if value is not None and not 0 <= value < cfg.vocab_size:
            raise ValueError(f"model.{key}={value} is outside the vocabulary [0, {cfg.vocab_size}).")
