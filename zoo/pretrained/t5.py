"""T5 (v1.0 and v1.1): encoder-decoder, RMSNorm pre-norm without biases, bucketed relative position bias (one
table per stack, stored in HF on the first layer's self-attention), unscaled dot products (attn_scale 1), a
ReLU or gated-GELU feed-forward, one shared token table.

The LM head: T5 v1.0 ties it to the token table and multiplies the decoder output by d_model ** -0.5 first;
v1.1 has its own head and no such scale. transformers 4 tells them apart by `tie_word_embeddings`;
transformers 5 always writes `tie_word_embeddings: true`, keeps the scale in `scale_decoder_outputs` and
leaves the head untied when the checkpoint holds a different `lm_head.weight`. zoo reads both as tied and
scaled (`head_scale`), or untied and unscaled.

Classes (`ARCH_CLASSES`): T5ForConditionalGeneration (the LM), T5Model (bare: the decoder's hidden states and the
encoder's), and the encoder alone as a zoo encoder with T5's relative bias: T5EncoderModel (bare) and
T5ForTokenClassification (its base under `transformer.`, then `classifier`). T5's sequence classification and QA
read the decoder's output (at the last eos / every position), which zoo's encoder_decoder heads (lm, none) do not
express; they are named in the error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.heads import HEADS
from zoo.modules.residual import uses_final_norm
from zoo.pretrained.family import FAMILIES, HFTensors, require, special_id, unsupported
from zoo.pretrained.heads import HeadedFamily, HeadLayout

# HF dense_act_fn -> zoo activation, plain (is_gated_act false) and gated (wi_0 the gate, wi_1 the value)
_PLAIN = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "silu": "silu",
          "swish": "silu"}
_GATED = {"gelu_new": "geglu_tanh", "gelu_pytorch_tanh": "geglu_tanh", "gelu": "geglu", "silu": "swiglu",
          "swish": "swiglu"}
# zoo activation -> (feed_forward_proj, dense_act_fn, is_gated_act) written on export
_TO_HF = {"relu": ("relu", "relu", False), "gelu": ("gelu", "gelu", False),
          "gelu_tanh": ("gelu_new", "gelu_new", False), "silu": ("silu", "silu", False),
          "geglu_tanh": ("gated-gelu", "gelu_new", True), "geglu": ("gated-gelu", "gelu", True),
          "swiglu": ("gated-silu", "silu", True)}
_UNUSED = {"EncDecAttention.relative_attention_bias":
           "cross-attention has no position bias (transformers ignores it too)"}


def _activation(hf: dict[str, Any]) -> str:
    """zoo's activation for what transformers runs: `dense_act_fn` / `is_gated_act` from config.json when present
    (they override what `feed_forward_proj` implies), else derived from `feed_forward_proj`."""
    proj = hf.get("feed_forward_proj", "relu")
    parts = proj.split("-")
    gated = hf.get("is_gated_act", len(parts) == 2 and parts[0] == "gated")
    act = hf.get("dense_act_fn") or ("gelu_new" if proj == "gated-gelu" else parts[-1])
    table = _GATED if gated else _PLAIN
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated") or act not in table:
        supported = sorted(_PLAIN) + [f"gated-{a}" for a in sorted(_GATED)]
        raise ValueError(
            f"t5 config.json uses settings zoo does not support: feed_forward_proj={proj!r} (dense_act_fn={act!r}, "
            f"is_gated_act={gated!r}); supported activations: {', '.join(supported)}."
        )
    return table[act]


def _layer_parts(cfg: ModelConfig, side: str) -> dict[str, tuple[int | None, list[tuple[str, int]]]]:
    """zoo tensor in a layer -> (its input width, None for a norm gain; the HF tensors under
    `{side}.block.{i}.` it is made of, in row order, with their rows)."""
    d, f, inner = cfg.d_model, cfg.ffn_dim, cfg.n_heads * cfg.head_size
    ffn = "layer.2.DenseReluDense" if side == "decoder" else "layer.1.DenseReluDense"
    gated = cfg.activation in _GATED.values()
    parts = {
        "self_attn.qkv": (d, [(f"layer.0.SelfAttention.{p}", inner) for p in "qkv"]),  # rows [q | k | v]
        "self_attn.o": (inner, [("layer.0.SelfAttention.o", d)]),
        "norm_self": (None, [("layer.0.layer_norm", d)]),
        "ffn.up": (d, [(f"{ffn}.wi_0", f), (f"{ffn}.wi_1", f)] if gated else [(f"{ffn}.wi", f)]),  # [gate | value]
        "ffn.down": (f, [(f"{ffn}.wo", d)]),
        "norm_ffn": (None, [(ffn.replace("DenseReluDense", "layer_norm"), d)]),
    }
    if side == "decoder":
        parts.update({
            "cross_attn.q": (d, [("layer.1.EncDecAttention.q", inner)]),
            "cross_attn.kv": (d, [(f"layer.1.EncDecAttention.{p}", inner) for p in "kv"]),  # rows [k | v]
            "cross_attn.o": (inner, [("layer.1.EncDecAttention.o", d)]),
            "norm_cross": (None, [("layer.1.layer_norm", d)]),
        })
    return parts


# zoo arch -> the stacks of a T5 checkpoint it holds: (HF stack, zoo stack, zoo embedding)
_SIDES = {"encoder_decoder": (("encoder", "encoder_stack", "src_embed"), ("decoder", "decoder_stack", "tgt_embed")),
          "encoder": (("encoder", "encoder_stack", "embed"),)}
# (zoo arch, model.head) -> the transformers class it is; the first per head is what a folder without
# `architectures` loads as (the LM) and the class name says the arch a folder loads as
ARCH_CLASSES = {("encoder_decoder", "lm"): "T5ForConditionalGeneration", ("encoder_decoder", "none"): "T5Model",
                ("encoder", "none"): "T5EncoderModel", ("encoder", "token_classifier"): "T5ForTokenClassification"}
_DECODER_HEADS = "its head reads the decoder's output, and zoo's encoder_decoder carries model.head=lm | none"


def _same_as(src: HFTensors, name: str, tokens: torch.Tensor, why: str) -> None:
    """Consume an optional stored copy of the token table; a copy holding other weights cannot be loaded."""
    copy = src.take_optional(name, tuple(tokens.shape))
    if copy is not None and not torch.equal(copy, tokens):
        raise ValueError(f"{src.source}: {src.key(name)!r} holds weights different from 'shared.weight', but {why}.")


@dataclass(frozen=True)
class T5LMLayout(HeadLayout):
    """T5's `lm_head`: the token table when tied (v1.0; a stored copy must equal it), else its own weight (v1.1;
    transformers 5 ties the head of a model configured untied and stores none: then a copy of the table)."""

    def origins(self) -> dict[str, str]:
        return {"head.proj.weight": "~lm_head.weight"}

    def from_hf(self, src: HFTensors, cfg: ModelConfig, out: dict[str, torch.Tensor]) -> None:
        tokens = out["tgt_embed.tokens.weight"]
        if cfg.tie_embeddings:
            _same_as(src, "~lm_head.weight", tokens, "config.json ties the head to it and scales the decoder output "
                     "(T5 v1.0); an untied head needs tie_word_embeddings=false or scale_decoder_outputs=false")
            out["head.proj.weight"] = tokens
        else:
            head = src.take_optional("~lm_head.weight", tuple(tokens.shape))
            out["head.proj.weight"] = tokens.clone() if head is None else head

    def to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str,
              out: dict[str, torch.Tensor]) -> None:
        if not cfg.tie_embeddings:
            out["lm_head.weight"] = state["head.proj.weight"]


@FAMILIES.register("t5")
class T5(HeadedFamily):
    model_type = "t5"
    architecture = "T5ForConditionalGeneration"
    class_prefix = "T5"
    lm_suffixes = ("ForConditionalGeneration",)
    prefixes = ("transformer.",)  # T5ForTokenClassification's encoder; the other classes store no prefix
    heads = {"lm": T5LMLayout("lm", prefix="", unused=_UNUSED), "none": HeadLayout("none", bare=True, unused=_UNUSED),
             "token_classifier": HeadLayout("token_classifier", proj="~classifier", labelled=True)}
    not_loaded = {"T5ForSequenceClassification": _DECODER_HEADS, "T5ForQuestionAnswering": _DECODER_HEADS}

    def classes(self) -> dict[str, str]:
        return {name: head for (_, head), name in ARCH_CLASSES.items()}

    def head_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return {**super().head_to_hf(cfg), "architectures": [ARCH_CLASSES[cfg.arch, cfg.head]]}

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        head = self.head_config(hf)  # checks `architectures` first
        named = (hf.get("architectures") or [self.class_for("lm")])[0]
        arch = next(arch for (arch, _), name in ARCH_CLASSES.items() if name == named)
        d, heads, layers = hf["d_model"], hf["num_heads"], hf["num_layers"]
        decoder_layers = layers if hf.get("num_decoder_layers") is None else hf["num_decoder_layers"]
        require(hf, "t5", {"num_layers >= 1": (layers >= 1, True),
                           "num_decoder_layers >= 1": (decoder_layers >= 1, True)})
        if "scale_decoder_outputs" in hf:  # written by transformers 5, whose tie_word_embeddings is always true
            tied = bool(hf["scale_decoder_outputs"])
        else:
            tied = hf.get("tie_word_embeddings", True) is not False
        d_kv = hf.get("d_kv", 64)  # transformers' default, whatever d_model / num_heads is
        vocab = hf["vocab_size"]
        pad = special_id(hf, "pad_token_id", vocab, 0)
        start = special_id(hf, "decoder_start_token_id", vocab, pad)  # T5 starts every target with the pad id
        depth = {"encoder_layers": layers, "decoder_layers": decoder_layers} if len(_SIDES[arch]) == 2 else {}
        return ModelConfig(
            arch=arch, vocab_size=vocab, d_model=d, n_layers=layers, **depth,
            n_heads=heads, head_dim=None if d_kv * heads == d else d_kv,
            attn_scale=1.0, d_ff=hf["d_ff"], activation=_activation(hf), norm="rmsnorm",
            norm_eps=hf.get("layer_norm_epsilon", 1e-6), norm_placement="pre", positional="t5_relative",
            rel_buckets=hf.get("relative_attention_num_buckets", 32),
            rel_max_distance=hf.get("relative_attention_max_distance", 128), max_seq_len=hf.get("n_positions", 512),
            dropout=hf.get("dropout_rate", 0.1), bias=False, tie_embeddings=tied, share_embeddings=True,
            head_scale=d**-0.5 if tied else None, pad_id=pad, eos_id=special_id(hf, "eos_token_id", vocab, 1),
            bos_id=special_id(hf, "bos_token_id", vocab, start), decoder_start_id=start, **head,
        )

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        checks = {
            f"(arch, head) in ({', '.join(f'{a}+{h}' for a, h in ARCH_CLASSES)})":
                ((cfg.arch, cfg.head) in ARCH_CLASSES, True),
            "norm": (cfg.norm, "rmsnorm"),
            "norm_placement": (cfg.norm_placement, "pre"), "use_final_norm": (uses_final_norm(cfg), True),
            "positional": (cfg.positional, "t5_relative"),
            "attn_scale": (cfg.attn_scale, 1.0), "bias": (cfg.bias, False), "qkv_bias": (cfg.use_qkv_bias, False),
            "head_bias": (cfg.head_bias, False), "n_kv_heads": (cfg.kv_heads, cfg.n_heads),
            f"activation in ({', '.join(_TO_HF)})": (cfg.activation in _TO_HF, True),
            "embed_norm": (cfg.embed_norm, False), "embed_scale": (cfg.embed_scale, False),
            "share_embeddings": (cfg.share_embeddings, True), "residual": (cfg.residual, True), "ffn": (cfg.ffn, "mlp"),
            "type_vocab_size": (cfg.type_vocab_size, 0), "head_transform": (cfg.head_transform, False),
        }
        if "head_scale" in HEADS.get(cfg.head).reads:  # the LM's: scaled exactly when tied (v1.0), not when not (v1.1)
            checks["head_scale"] = (cfg.head_scale, cfg.d_model**-0.5 if cfg.tie_embeddings else None)
        unsupported(cfg, "t5", checks)
        proj, act, gated = _TO_HF[cfg.activation]
        return {
            "model_type": "t5", **self.head_to_hf(cfg), "vocab_size": cfg.vocab_size,
            "d_model": cfg.d_model, "d_kv": cfg.head_size, "d_ff": cfg.ffn_dim, "num_layers": cfg.n_encoder_layers,
            "num_decoder_layers": cfg.n_decoder_layers, "num_heads": cfg.n_heads,
            "relative_attention_num_buckets": cfg.rel_buckets, "relative_attention_max_distance": cfg.rel_max_distance,
            "feed_forward_proj": proj, "dense_act_fn": act, "is_gated_act": gated, "layer_norm_epsilon": cfg.norm_eps,
            "dropout_rate": cfg.dropout, "n_positions": cfg.max_seq_len, "tie_word_embeddings": cfg.tie_embeddings,
            "scale_decoder_outputs": cfg.tie_embeddings, "pad_token_id": cfg.pad_id, "eos_token_id": cfg.eos_id,
            "bos_token_id": cfg.bos_id, "decoder_start_token_id": cfg.start_id, "is_encoder_decoder": True,
        }

    def base_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        v, d = cfg.vocab_size, cfg.d_model
        tokens = src.take("shared.weight", (v, d))
        for name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):  # copies in older checkpoints
            _same_as(src, name, tokens, "zoo, like transformers' T5, keeps one token table for both stacks")
        sides = _SIDES[cfg.arch]
        out = {f"{embed}.tokens.weight": tokens for _, _, embed in sides}
        for side, stack, embed in sides:
            out[f"{embed}.positional.relative_bias.weight"] = src.take(
                f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight", (cfg.rel_buckets, cfg.n_heads)
            )
            for i in range(cfg.n_encoder_layers if side == "encoder" else cfg.n_decoder_layers):
                for zoo_name, (cols, pieces) in _layer_parts(cfg, side).items():
                    out[f"{stack}.layers.{i}.{zoo_name}.weight"] = torch.cat([
                        src.take(f"{side}.block.{i}.{name}.weight", (rows,) if cols is None else (rows, cols))
                        for name, rows in pieces
                    ])
            out[f"{stack}.final_norm.weight"] = src.take(f"{side}.final_layer_norm.weight", (d,))
        return out

    def base_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str) -> dict[str, torch.Tensor]:
        sides = _SIDES[cfg.arch]
        out = {f"{prefix}shared.weight": state[f"{sides[0][2]}.tokens.weight"]}
        for side, stack, embed in sides:
            out[f"{prefix}{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = state[
                f"{embed}.positional.relative_bias.weight"
            ]
            for i in range(cfg.n_encoder_layers if side == "encoder" else cfg.n_decoder_layers):
                for zoo_name, (_, pieces) in _layer_parts(cfg, side).items():
                    chunks = state[f"{stack}.layers.{i}.{zoo_name}.weight"].split([rows for _, rows in pieces])
                    for (name, _), chunk in zip(pieces, chunks, strict=True):
                        out[f"{prefix}{side}.block.{i}.{name}.weight"] = chunk
            out[f"{prefix}{side}.final_layer_norm.weight"] = state[f"{stack}.final_norm.weight"]
        return out
