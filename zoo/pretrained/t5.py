"""T5 (v1.0 and v1.1): encoder-decoder, RMSNorm pre-norm without biases, bucketed relative position bias (one
table per stack, stored in HF on the first layer's self-attention; `model.positional: t5_relative`), unscaled
dot products (`model.mixer.scale` 1), a ReLU or gated-GELU feed-forward, one shared token table.

The LM head: T5 v1.0 ties it to the token table and multiplies the decoder output by d_model ** -0.5 first;
v1.1 has its own head and no such scale. transformers 4 tells them apart by `tie_word_embeddings`;
transformers 5 always writes `tie_word_embeddings: true`, keeps the scale in `scale_decoder_outputs` and
leaves the head untied when the checkpoint holds a different `lm_head.weight`. zoo reads both as tied and
scaled (`model.head.scale`), or untied and unscaled.

Classes (`ARCH_CLASSES`): T5ForConditionalGeneration (the LM), T5Model (bare: the decoder's hidden states and
the encoder's), and the encoder alone as a zoo encoder with T5's relative bias: T5EncoderModel (bare) and
T5ForTokenClassification (its base under `transformer.`, then `classifier`). T5's sequence classification and
QA read the decoder's output (at the last eos / every position), which zoo's encoder_decoder heads (lm, none)
do not express; they are named in the error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.pretrained.config_map import Key
from zoo.pretrained.family import Checks, Family
from zoo.pretrained.heads import HeadLayout
from zoo.pretrained.tensor_map import HFTensors, Rows, within

# HF dense_act_fn -> zoo activation, plain (is_gated_act false) and gated (wi_0 the gate, wi_1 the value)
_PLAIN = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
          "silu": "silu", "swish": "silu"}
_GATED = {"gelu_new": "geglu_tanh", "gelu_pytorch_tanh": "geglu_tanh", "gelu": "geglu", "silu": "swiglu",
          "swish": "swiglu"}
# zoo activation -> (feed_forward_proj, dense_act_fn, is_gated_act) written on export
_TO_HF = {"relu": ("relu", "relu", False), "gelu": ("gelu", "gelu", False),
          "gelu_tanh": ("gelu_new", "gelu_new", False), "silu": ("silu", "silu", False),
          "geglu_tanh": ("gated-gelu", "gelu_new", True), "geglu": ("gated-gelu", "gelu", True),
          "swiglu": ("gated-silu", "silu", True)}
_UNUSED = {"EncDecAttention.relative_attention_bias":
           "cross-attention has no position bias (transformers ignores it too)"}


def _activation(hf: Mapping[str, Any]) -> str:
    """zoo's activation for what transformers runs: `dense_act_fn` / `is_gated_act` from config.json when
    present (they override what `feed_forward_proj` implies), else derived from `feed_forward_proj`."""
    proj = hf.get("feed_forward_proj", "relu")
    parts = proj.split("-")
    gated = hf.get("is_gated_act", len(parts) == 2 and parts[0] == "gated")
    act = hf.get("dense_act_fn") or ("gelu_new" if proj == "gated-gelu" else parts[-1])
    table = _GATED if gated else _PLAIN
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated") or act not in table:
        supported = sorted(_PLAIN) + [f"gated-{a}" for a in sorted(_GATED)]
        raise ValueError(
            f"t5 config.json uses settings zoo does not support: feed_forward_proj={proj!r} "
            f"(dense_act_fn={act!r}, is_gated_act={gated!r}); supported activations: {', '.join(supported)}."
        )
    return table[act]


def _stack(side: str, ffn: str, up: tuple[str, ...]) -> dict:
    """The rows of one T5 stack's layers (`ffn`: the feed-forward's sub-layer; `up`: its input matrices)."""
    attn, cross = "layer.0.SelfAttention.", "layer.1.EncDecAttention."
    return within(side + "_stack.layers.{i}.", side + ".block.{i}.", {
        "self_attn.qkv.weight": tuple(f"{attn}{p}.weight" for p in "qkv"),
        "self_attn.o.weight": f"{attn}o.weight",
        "norm_self.weight": "layer.0.layer_norm.weight", "ffn.down.weight": f"{ffn}.DenseReluDense.wo.weight",
        "ffn.up.weight": tuple(f"{ffn}.DenseReluDense.{u}.weight" for u in up),  # [gate | value]
        "norm_ffn.weight": f"{ffn}.layer_norm.weight", "cross_attn.q.weight": f"{cross}q.weight",
        "cross_attn.kv.weight": (f"{cross}k.weight", f"{cross}v.weight"),
        "cross_attn.o.weight": f"{cross}o.weight",
        "norm_cross.weight": "layer.1.layer_norm.weight"})


_BIAS = "{}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"  # one per stack, on its layer 0
# (zoo arch, model.head) -> the transformers class it is; the first per head is what a folder without
# `architectures` loads as (the LM) and the class name says the arch a folder loads as
ARCH_CLASSES = {("encoder_decoder", "lm"): "T5ForConditionalGeneration",
                ("encoder_decoder", "none"): "T5Model", ("encoder", "none"): "T5EncoderModel",
                ("encoder", "token_classifier"): "T5ForTokenClassification"}
_DECODER_HEADS = "its head reads the decoder's output, and zoo's encoder_decoder carries model.head=lm | none"


def _same_as(src: HFTensors, name: str, tokens: torch.Tensor, why: str) -> None:
    """Consume an optional stored copy of the token table; a copy holding other weights cannot be loaded."""
    copy = src.take_optional(name, tuple(tokens.shape))
    if copy is not None and not torch.equal(copy, tokens):
        raise ValueError(f"{src.source}: {src.key(name)!r} holds weights "
                         f"different from 'shared.weight', but {why}.")


@dataclass(frozen=True)
class T5LMLayout(HeadLayout):
    """T5's `lm_head`: the token table when tied (v1.0; a stored copy must equal it), else its own weight
    (v1.1; transformers 5 ties the head of a model configured untied and stores none: then a copy of the
    table)."""

    def origins(self) -> dict[str, str]:
        return {"head.proj.weight": "~lm_head.weight"}

    def from_hf(self, src: HFTensors, cfg: ModelConfig, out: dict[str, torch.Tensor],
                shapes: Mapping[str, tuple[int, ...]]) -> None:
        tokens = out["tgt_embed.tokens.weight"]
        if cfg.tie_embeddings:
            _same_as(src, "~lm_head.weight", tokens,
                     "config.json ties the head to it and scales the decoder output "
                     "(T5 v1.0); an untied head needs tie_word_embeddings=false or "
                     "scale_decoder_outputs=false")
            out["head.proj.weight"] = tokens
        else:
            head = src.take_optional("~lm_head.weight", tuple(tokens.shape))
            out["head.proj.weight"] = tokens.clone() if head is None else head

    def to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str
              ) -> dict[str, torch.Tensor]:
        return {} if cfg.tie_embeddings else {"lm_head.weight": state["head.proj.weight"]}


class T5(Family):
    model_type = "t5"
    class_prefix = "T5"
    lm_suffixes = ("ForConditionalGeneration",)
    prefixes = ("transformer.",)  # T5ForTokenClassification's encoder; the other classes store no prefix
    heads = {"lm": T5LMLayout("lm", prefix="", unused=_UNUSED),
             "none": HeadLayout("none", bare=True, unused=_UNUSED),
             "token_classifier": HeadLayout("token_classifier", proj="~classifier", labelled=True)}
    not_loaded = {"T5ForSequenceClassification": _DECODER_HEADS, "T5ForQuestionAnswering": _DECODER_HEADS}
    keys = (
        Key("vocab_size", "vocab_size"), Key("d_model", "d_model"), Key("n_heads", "num_heads"),
        Key("n_layers", "num_layers"), Key("head_dim", "d_kv", 64), Key("d_ff", "d_ff"),
        Key("norm_eps", "layer_norm_epsilon", 1e-6),
        Key("positional.buckets", "relative_attention_num_buckets", 32),
        Key("positional.max_distance", "relative_attention_max_distance", 128),
        Key("max_seq_len", "n_positions", 512),
        Key("dropout", "dropout_rate", 0.1), Key("pad_id", "pad_token_id", 0, token=True),
        Key("eos_id", "eos_token_id", 1, token=True),  # T5 starts every target with the pad id:
        Key("decoder_start_id", "decoder_start_token_id", "pad_id", token=True),
        Key("bos_id", "bos_token_id", "decoder_start_id", token=True),
    )
    fixed = {"mixer.scale": 1.0, "norm": "rmsnorm", "norm_placement": "pre", "positional": "t5_relative",
             "bias": False, "share_embeddings": True}

    def classes(self) -> dict[str, str]:
        return {name: head for (_, head), name in ARCH_CLASSES.items()}

    def head_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        # a pair zoo's classes do not hold: the head's class, and the round trip names the rest
        named = ARCH_CLASSES.get((cfg.arch, cfg.head.name)) or self.class_for(cfg.head.name)
        return {**super().head_to_hf(cfg), "architectures": [named]}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        self.layout(hf)  # an unknown class is named before anything else
        named = (hf.get("architectures") or [self.class_for("lm")])[0]
        arch = next(arch for (arch, _), name in ARCH_CLASSES.items() if name == named)
        layers = settings["n_layers"]
        decoder_layers = layers if hf.get("num_decoder_layers") is None else hf["num_decoder_layers"]
        # written by transformers 5, whose tie_word_embeddings is always true
        if "scale_decoder_outputs" in hf:
            tied = bool(hf["scale_decoder_outputs"])
        else:
            tied = hf.get("tie_word_embeddings", True) is not False
        depth = ({"encoder_layers": layers, "decoder_layers": decoder_layers} if arch == "encoder_decoder"
                 else {})
        checks = {"num_layers >= 1": (layers >= 1, True),
                  "num_decoder_layers >= 1": (decoder_layers >= 1, True)}
        return {"arch": arch, **depth, "activation": _activation(hf), "tie_embeddings": tied,
                **self.lm_keys(hf, {"head.scale": settings["d_model"] ** -0.5 if tied else None})}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        proj, act, gated = _TO_HF.get(cfg.activation, _TO_HF["relu"])  # another one: the round trip names it
        return {"num_layers": cfg.n_encoder_layers, "num_decoder_layers": cfg.n_decoder_layers,
                "feed_forward_proj": proj, "dense_act_fn": act, "is_gated_act": gated,
                "tie_word_embeddings": cfg.tie_embeddings, "scale_decoder_outputs": cfg.tie_embeddings,
                "is_encoder_decoder": True}

    def tensor_map(self, cfg: ModelConfig) -> Rows:
        up = ("wi_0", "wi_1") if cfg.activation in _GATED.values() else ("wi",)
        return {"{e}.tokens.weight": "shared.weight",
                "src_embed.positional.relative_bias.weight": _BIAS.format("encoder"),
                "embed.positional.relative_bias.weight": _BIAS.format("encoder"),
                "tgt_embed.positional.relative_bias.weight": _BIAS.format("decoder"),
                "encoder_stack.final_norm.weight": "encoder.final_layer_norm.weight",
                "decoder_stack.final_norm.weight": "decoder.final_layer_norm.weight",
                **_stack("encoder", "layer.1", up), **_stack("decoder", "layer.2", up)}

    def read_first(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        tokens = src.take("shared.weight", (cfg.vocab_size, cfg.d_model))  # the map reads it again (the same)
        # copies in older checkpoints
        for name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
            _same_as(src, name, tokens, "zoo, like transformers' T5, keeps one token table for both stacks")
        return {}
