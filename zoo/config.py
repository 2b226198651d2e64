"""ModelConfig: the one plain-data description of a model. The spine (arch, sizes, norm, residual wiring,
embeddings, dropout, ids) is flat; each part that has keys of its own holds them as typed settings beside
the code that reads them: `positional` (zoo.modules.positional_settings), `mixer`
(zoo.modules.mixer_settings), `ffn` (zoo.modules.ffn_settings, MoE's keys inside it), `layer_pattern`
(zoo.modules.layer_pattern), `head` (zoo.modules.head_settings). A name alone chooses a part with its
defaults; another name replaces the subtree. Derived sizes are properties.

Config is data: it imports no module it configures. MODEL_OPTIONS holds the rules of the spine keys; what the
keys say together is checked in one pass when the model is built (`zoo.models.check_config`, docs/design.md
"Config parts"). Saved configs of the flat layout are read through zoo.config_moved.upgrade_saved."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from zoo.config_moved import MOVED
from zoo.modules.ffn_settings import FFN, MLPSettings
from zoo.modules.head_settings import HEAD, LMHeadSettings
from zoo.modules.layer_pattern import LayerPattern
from zoo.modules.mixer_settings import MIXER, AttentionSettings
from zoo.modules.mtp_settings import MTP
from zoo.modules.positional_settings import POSITIONAL, LearnedSettings
from zoo.options import (
    BOOL,
    COUNT,
    NAME,
    POSITIVE,
    SWITCH,
    Options,
    integer,
    number,
    optional,
    within,
)
from zoo.parts import Part
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
    mixer: Part = field(default_factory=AttentionSettings)  # the token mixer and its keys
    #   (zoo.modules.mixer_settings: `{name: attention, qk_norm: true, sliding_window: 512, ...}`)
    linear_mixer: Part | None = None  # hybrids: the mixer of the layers model.layer_pattern tags `linear`
    #   (`{name: gated_deltanet, ...}`: Qwen3-Next, Qwen3.5); model.mixer runs the others. null: none
    layer_pattern: LayerPattern = field(default_factory=LayerPattern)  # what each layer is (local or
    #   global, rotary or not, dense or MoE): zoo.modules.layer_pattern
    ffn: Part = field(default_factory=MLPSettings)  # the FFN sub-layer and its keys
    #   (zoo.modules.ffn_settings: mlp | none | `{name: moe, n_experts: 8, top_k: 2, router: ...}`)
    context_size: int = 0  # arch mlp_lm: tokens its MLP reads (the
                           # current one and k-1 before); others: unused
    ffn_ratio: float = 4.0  # d_ff = ffn_ratio * d_model unless d_ff is given
    d_ff: int | None = None
    activation: str = "gelu"  # relu | gelu | gelu_tanh | silu | swiglu | geglu
    norm: str = "layernorm"  # layernorm | rmsnorm | none
    norm_eps: float = 1e-5
    norm_placement: str = "pre"  # residual wiring: pre | post | sandwich | parallel
    final_norm: bool | None = None  # default: the wiring's (True for pre/sandwich/parallel, False for post)
    first_attn_norm: bool = True  # False: layer 0's attention norm is the identity (ModernBERT: the
                                  # embedding norm right before it does that job)
    embed_norm: bool = False  # a norm right after the embeddings (BERT, BART)
    embed_scale: bool = False  # multiply token embeddings by sqrt(d_model) (Vaswani, Marian)
    embed_multiplier: float = 1.0  # and by this factor (MiniCPM's scale_emb, Granite's embedding_multiplier)
    depth_scale: float | None = None  # each residual branch times depth_scale / sqrt(layers of its stack)
    #   (MiniCPM's scale_depth); null: unscaled
    residual: bool = True  # False drops the residual connections (minimal attention-only models)
    positional: Part = field(default_factory=LearnedSettings)  # the positional scheme and its keys
    #   (zoo.modules.positional_settings: `{name: rope, base: 1e6, scaling: {name: yarn, factor: 8}}`)
    max_seq_len: int = 256
    dropout: float = 0.0
    attn_dropout: float | None = None  # default: dropout
    bias: bool = True  # biases in linear layers and LayerNorm
    tie_embeddings: bool = True  # output projection shares the (decoder) token embedding
    share_embeddings: bool = True  # encoder_decoder: one token table for source and target
    type_vocab_size: int = 0  # token-type (segment) embeddings, BERT; 0 = none
    head: Part = field(default_factory=LMHeadSettings)  # the output head and its keys
    #   (zoo.modules.head_settings: `{name: classifier, num_labels: 3, pool: mean}`)
    mtp: Part | None = None  # multi-token prediction modules beside the head and their loss weight
    #   (zoo.modules.mtp_settings: `{name: sequential, depth: 1, weight: 0.3}`: DeepSeek-V3). null: none
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    decoder_start_id: int | None = None  # encoder_decoder: first decoder token; default bos_id
    init_std: float = 0.02

    # ----- derived sizes -----
    @property
    def head_size(self) -> int:
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    def __post_init__(self) -> None:
        """The parts given as names or mappings become their typed settings (plain data either way)."""
        self.positional = POSITIONAL.parse(self.positional)
        self.mixer = MIXER.parse(self.mixer)
        if self.linear_mixer is not None:
            self.linear_mixer = MIXER.parse(self.linear_mixer, "model.linear_mixer")
        self.layer_pattern = LayerPattern.parse(self.layer_pattern)
        self.head = HEAD.parse(self.head)
        self.ffn = FFN.parse(self.ffn)
        if self.mtp is not None:
            self.mtp = MTP.parse(self.mtp, "model.mtp")

    def with_head(self, **keys: Any) -> ModelConfig:
        """This config with some keys of its head changed (`with_head(num_labels=3)`: the data's labels)."""
        return dataclasses.replace(self, head=HEAD.merge(self.head, keys))

    def layer_is_linear(self, index: int) -> bool:
        """Whether layer `index` runs model.linear_mixer (the layers tagged `linear`; none without one)."""
        return self.linear_mixer is not None and self.layer_pattern.says(index, "linear", "full", False)

    def layer_mixer(self, index: int) -> Part:
        """The settings of the mixer layer `index` runs."""
        return self.linear_mixer if self.layer_is_linear(index) else self.mixer

    def for_layer(self, index: int) -> ModelConfig:
        """This config as layer `index`'s mixer reads it: `mixer` is the one that layer runs."""
        mixer = self.layer_mixer(index)
        return self if mixer is self.mixer else dataclasses.replace(self, mixer=mixer)

    def layer_norm_placement(self, index: int) -> str:
        """The residual wiring of layer `index`: its mixer's own `norm_placement` where that mixer has one set
        (OLMo-hybrid's linear layers: pre beside post_sublayer attention), else model.norm_placement."""
        own = getattr(self.layer_mixer(index), "norm_placement", None)  # only some mixers carry the key
        return self.norm_placement if own is None else own

    def mixers_in_use(self) -> list[tuple[str, Part]]:
        """(config key, settings) of each mixer some layer runs: model.mixer, and model.linear_mixer when set
        (check_layers refuses one no layer runs)."""
        return [("model.mixer", self.mixer)] + ([("model.linear_mixer", self.linear_mixer)]
                                                if self.linear_mixer is not None else [])

    def layer_is_local(self, index: int) -> bool:
        """Whether layer `index` (0-based, within its stack) uses the sliding window: every layer when the
        mixer has a window and the layer pattern tags none (Mistral), else the layers tagged `local`."""
        if getattr(self.mixer, "sliding_window", None) is None:
            return False
        return self.layer_pattern.says(index, "local", "global", True)

    def layer_rotates(self, index: int) -> bool:
        """Whether layer `index` applies the rotary terms (all but the layers tagged `nope`: SmolLM3)."""
        return self.layer_pattern.says(index, "rope", "nope", True)

    def layer_is_moe(self, index: int) -> bool:
        """Whether layer `index`'s FFN is a Mixture of Experts (ffn=moe: all but the layers tagged dense)."""
        return self.ffn.name == "moe" and self.layer_pattern.says(index, "moe", "dense", True)

    @property
    def use_qkv_bias(self) -> bool:
        return self.mixer.qkv_bias_or(self.bias)

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
        """Build from a dict / OmegaConf node / ModelConfig; an unknown key raises with a close match, a key
        of the flat layout before the parts owned their keys names its new place."""
        if isinstance(data, ModelConfig):
            return dataclasses.replace(data)
        data = plain_dict(data, "model", expected=MODEL_SPEC)
        data.pop("defaults", None)  # a Hydra group file's defaults list is not a model field
        known = [f.name for f in fields(cls)]
        for key in data:
            if key in MOVED:
                raise ValueError(f"model.{key} is now {MOVED[key]} (each part owns its keys since issue 35; "
                                 "docs/design.md, \"Config parts\").")
            if key not in known:
                hint = did_you_mean(key, known)
                raise ValueError(f"Unknown model config key {key!r}.{hint} Known keys: {', '.join(known)}.")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (no OmegaConf, no tensors): safe to store in checkpoints and JSON; parts as
        {name, keys}."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


PARTS = {"positional": POSITIONAL, "mixer": MIXER, "linear_mixer": MIXER, "ffn": FFN,
         "head": HEAD, "mtp": MTP}  # config key -> its settings table


def lay_over(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`overrides` laid over `base` (plain config data): a part given as a mapping without a name (or the
    same one) changes only its keys (`positional={"base": 1e6}`); a name or another name replaces it; any
    other key replaces its value."""
    merged = {**base, **overrides}
    for key, table in PARTS.items():
        if key in overrides and isinstance(overrides[key], Mapping) and base.get(key) is not None:
            path = f"model.{key}"
            merged[key] = table.merge(table.parse(base[key], path), overrides[key], path).to_data()
    return merged


def nest_paths(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys as nested parts: {"positional": "rope", "positional.base": 1e6, "positional.scaling.name":
    "yarn"} -> {"positional": {"name": "rope", "base": 1e6, "scaling": {"name": "yarn"}}} (a part named by a
    string takes the dotted keys beside its name). The form the HF family tables read and write."""
    out: dict[str, Any] = {}
    for path, value in sorted(flat.items(), key=lambda kv: kv[0].count(".")):
        *parents, leaf = path.split(".")
        node = out
        for parent in parents:
            held = node.get(parent)
            node[parent] = held = ({"name": held} if isinstance(held, str) else dict(held or {}))
            node = held
        if isinstance(node.get(leaf), Mapping) and isinstance(value, str):
            node[leaf] = {**node[leaf], "name": value}
        else:
            node[leaf] = value
    return out


def value_at(cfg: Any, path: str) -> Any:
    """`cfg.positional.scaling.factor` for "positional.scaling.factor"; a part's "name" is its name."""
    for name in path.split("."):
        cfg = getattr(cfg, name)
    return cfg


def _plain(value: Any) -> Any:
    return value.to_data() if isinstance(value, (Part, LayerPattern)) else copy.deepcopy(value)


MODEL_SPEC = "a preset name, mapping or ModelConfig"  # what `model` may be, in error messages


FRACTION = within(number(), lambda v: 0 <= v < 1, "in [0, 1)")
MAX_LAYERS = 4096  # ~30x the deepest released model; past it a typo (10**40) would build for hours
LAYERS = within(COUNT, lambda v: v <= MAX_LAYERS, f"<= {MAX_LAYERS} (a layer count, not a size)")
MAX_SIZE = 2**31 - 1  # every real width, vocabulary or context fits; two multiplied still fit int64
SIZE = within(POSITIVE, lambda v: v <= MAX_SIZE, f"<= {MAX_SIZE:,} (2**31 - 1)")

# The spine keys and their rules (a part's keys are its settings class's fields), checked by
# zoo.models.vocabulary.check_config, once per config: config is data and imports no module it configures.
MODEL_OPTIONS = Options({
    **{key: NAME for key in ("arch", "activation", "norm", "norm_placement")},
    **{key: SIZE for key in ("vocab_size", "d_model", "n_heads", "max_seq_len")},
    **{key: within(COUNT, lambda v: v <= MAX_SIZE, f"<= {MAX_SIZE:,} (2**31 - 1)")
       for key in ("type_vocab_size", "context_size")},
    "n_layers": LAYERS, **{key: optional(LAYERS) for key in ("encoder_layers", "decoder_layers")},
    **{key: BOOL for key in ("first_attn_norm", "embed_norm", "embed_scale", "residual", "bias",
                             "share_embeddings", "tie_embeddings")},
    "final_norm": SWITCH,
    **{key: optional(integer()) for key in ("pad_id", "bos_id", "eos_id", "decoder_start_id")},
    "n_kv_heads": optional(SIZE),
    "head_dim": optional(SIZE, f"a positive integer <= {MAX_SIZE:,} (or null for d_model // n_heads)"),
    "ffn_ratio": number(), "d_ff": optional(integer(high=MAX_SIZE)),
    "norm_eps": within(number(), lambda v: v > 0, "> 0"),
    "dropout": FRACTION, "attn_dropout": optional(FRACTION),
    "init_std": within(number(), lambda v: v >= 0, ">= 0"),
    "embed_multiplier": number(0.0, low_open=True),
    "depth_scale": optional(number(0.0, low_open=True), "a finite number > 0 (or null: unscaled)"),
})


def check_sizes(cfg: ModelConfig) -> None:
    """What the fields say together: heads divide the width, token ids lie in the vocabulary (ValueError)."""
    if cfg.head_dim is None and cfg.d_model % cfg.n_heads and not cfg.mixer.own_head_sizes:
        raise ValueError(f"model.d_model={cfg.d_model} is not divisible by model.n_heads={cfg.n_heads}; "
                         "choose n_heads among the divisors of d_model, or set model.head_dim.")
    if cfg.n_heads % cfg.kv_heads:
        raise ValueError(f"model.n_heads={cfg.n_heads} is not divisible by "
                         f"model.n_kv_heads={cfg.n_kv_heads}; n_kv_heads must divide n_heads (n_heads = MHA, "
                         "1 = MQA).")
    if cfg.ffn_dim < 1 and cfg.ffn.name != "none":
        raise ValueError(f"model.d_ff/ffn_ratio give a hidden size of {cfg.ffn_dim}; it must be >= 1.")
    for key in ("pad_id", "bos_id", "eos_id", "decoder_start_id"):
        value = getattr(cfg, key)
        if value is not None and not 0 <= value < cfg.vocab_size:
            raise ValueError(f"model.{key}={value} is outside the vocabulary [0, {cfg.vocab_size}).")
