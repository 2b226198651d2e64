"""BERT: encoder, post-LN, learned positions + token types, LayerNorm after the embeddings (eps 1e-12); the head
the folder's class says: BertModel (pooler), masked-LM (dense, activation, LayerNorm, tied decoder with bias),
sequence / token classification, question answering (`HEADS` below)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.residual import uses_final_norm
from zoo.pretrained.family import (
    FAMILIES,
    ZOO_TO_HF_ACTIVATION,
    HFTensors,
    hf_activation,
    require,
    special_id,
    unsupported,
)
from zoo.pretrained.heads import HeadedFamily, HeadLayout, stored_name


@dataclass(frozen=True)
class EncoderLayout:
    """Where a post-LN encoder layer of the BERT kind keeps its tensors in a Hugging Face checkpoint: the layers'
    prefix, q/k/v Linear names inside a layer (fused as zoo's [q | k | v] rows) and the other sub-modules."""

    layers: str
    qkv: tuple[str, str, str]
    modules: Mapping[str, str]  # zoo sub-module -> HF sub-module inside a layer

    def from_hf(self, src: HFTensors, cfg: ModelConfig, out: dict[str, torch.Tensor]) -> None:
        """Every layer's tensors into `out` under `encoder_stack.layers.{i}.`."""
        d, f = cfg.d_model, cfg.ffn_dim
        dims = {"self_attn.o": (d, d), "ffn.up": (f, d), "ffn.down": (d, f), "norm_self": (d, None),
                "norm_ffn": (d, None)}
        for i in range(cfg.n_layers):
            z, h = f"encoder_stack.layers.{i}", f"{self.layers}.{i}"
            qkv = [_linear(src, f"{h}.{p}", d, d) for p in self.qkv]
            out[f"{z}.self_attn.qkv.weight"] = torch.cat([w for w, _ in qkv])  # rows [q | k | v]
            out[f"{z}.self_attn.qkv.bias"] = torch.cat([b for _, b in qkv])
            for zoo_name, hf_name in self.modules.items():
                out[f"{z}.{zoo_name}.weight"], out[f"{z}.{zoo_name}.bias"] = _linear(src, f"{h}.{hf_name}",
                                                                                     *dims[zoo_name])

    def to_hf(self, state: dict[str, torch.Tensor], cfg: ModelConfig, prefix: str, out: dict[str, torch.Tensor]) -> None:
        """Inverse of `from_hf`, HF names under `prefix` ("bert.", "distilbert.")."""
        for i in range(cfg.n_layers):
            z, h = f"encoder_stack.layers.{i}", f"{prefix}{self.layers}.{i}"
            for part in ("weight", "bias"):
                for name, chunk in zip(self.qkv, state[f"{z}.self_attn.qkv.{part}"].chunk(3), strict=True):
                    out[f"{h}.{name}.{part}"] = chunk
                for zoo_name, hf_name in self.modules.items():
                    out[f"{h}.{hf_name}.{part}"] = state[f"{z}.{zoo_name}.{part}"]


BERT_LAYOUT = EncoderLayout(
    "encoder.layer", ("attention.self.query", "attention.self.key", "attention.self.value"),
    {"self_attn.o": "attention.output.dense", "norm_self": "attention.output.LayerNorm",
     "ffn.up": "intermediate.dense", "ffn.down": "output.dense", "norm_ffn": "output.LayerNorm"},
)


def _linear(src: HFTensors, name: str, out_dim: int, in_dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) of an nn.Linear (in_dim given) or a LayerNorm (in_dim None)."""
    weight_shape = (out_dim, in_dim) if in_dim is not None else (out_dim,)
    return src.take(f"{name}.weight", weight_shape), src.take(f"{name}.bias", (out_dim,))


def encoder_from_hf(src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Embeddings (tokens, positions incl. any offset rows, token types, LayerNorm) and every layer of a
    BERT-layout encoder (BERT, RoBERTa), q/k/v fused as zoo's [q | k | v] rows."""
    d, v = cfg.d_model, cfg.vocab_size
    out = {
        "embed.tokens.weight": src.take("embeddings.word_embeddings.weight", (v, d)),
        "embed.positional.table.weight": src.take(
            "embeddings.position_embeddings.weight", (cfg.max_seq_len + cfg.pos_offset, d)
        ),
        "embed.types.weight": src.take("embeddings.token_type_embeddings.weight", (cfg.type_vocab_size, d)),
    }
    out["embed.norm.weight"], out["embed.norm.bias"] = _linear(src, "embeddings.LayerNorm", d)
    BERT_LAYOUT.from_hf(src, cfg, out)
    return out


def encoder_to_hf(state: dict[str, torch.Tensor], cfg: ModelConfig, prefix: str) -> dict[str, torch.Tensor]:
    """Inverse of `encoder_from_hf`, names under `prefix` ("bert.", "roberta.")."""
    base = f"{prefix}embeddings"
    out = {
        f"{base}.word_embeddings.weight": state["embed.tokens.weight"],
        f"{base}.position_embeddings.weight": state["embed.positional.table.weight"],
        f"{base}.token_type_embeddings.weight": state["embed.types.weight"],
        f"{base}.LayerNorm.weight": state["embed.norm.weight"],
        f"{base}.LayerNorm.bias": state["embed.norm.bias"],
    }
    BERT_LAYOUT.to_hf(state, cfg, prefix, out)
    return out


def mlm_head_from_hf(src: HFTensors, cfg: ModelConfig, out: dict[str, torch.Tensor], dense: str, norm: str,
                     bias: str, decoder: str) -> None:
    """The masked-LM head (dense, norm, vocabulary projection + bias, tied or not) into `out`. The forward pass
    adds `decoder`.bias: an alias of `bias` unless transformers 5 untied them (tie_word_embeddings=false)."""
    d, v = cfg.d_model, cfg.vocab_size
    out["head.transform.weight"], out["head.transform.bias"] = _linear(src, dense, d, d)
    out["head.transform_norm.weight"], out["head.transform_norm.bias"] = _linear(src, norm, d)
    shared_bias = src.take(bias, (v,))
    decoder_bias = src.take_optional(f"{decoder}.bias", (v,))
    out["head.proj.bias"] = shared_bias if decoder_bias is None else decoder_bias
    if cfg.tie_embeddings:
        src.discard(f"{decoder}.weight")
        out["head.proj.weight"] = out["embed.tokens.weight"]
    else:
        out["head.proj.weight"] = src.take(f"{decoder}.weight", (v, d))


@dataclass(frozen=True)
class MaskedLMLayout(HeadLayout):
    """A masked-LM head: `dense`, activation, `norm`, then the vocabulary projection, tied to the token table
    unless the config unties it, whose bias is stored as `bias` (and as `decoder`.bias when untied)."""

    dense: str = ""
    norm: str = ""
    bias: str = ""
    decoder: str = ""

    def config(self, hf: Mapping[str, Any], family: HeadedFamily) -> dict[str, Any]:
        return {"head": "lm", **family.lm_config(hf)}

    def origins(self) -> dict[str, str]:
        pairs = {"head.transform": self.dense, "head.transform_norm": self.norm}
        out = {f"{z}.{part}": f"{h}.{part}" for z, h in pairs.items() for part in ("weight", "bias")}
        return {**out, "head.proj.bias": self.bias, "head.proj.weight": f"{self.decoder}.weight"}

    def from_hf(self, src: HFTensors, cfg: ModelConfig, out: dict[str, torch.Tensor]) -> None:
        mlm_head_from_hf(src, cfg, out, self.dense, self.norm, self.bias, self.decoder)

    def to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str,
              out: dict[str, torch.Tensor]) -> None:
        for zoo_name, name in self.origins().items():
            if zoo_name != "head.proj.weight":
                out[stored_name(name, prefix)] = state[zoo_name]
        if not cfg.tie_embeddings:  # transformers 5 then unties decoder.weight and decoder.bias too
            out[stored_name(f"{self.decoder}.weight", prefix)] = state["head.proj.weight"]
            out[stored_name(f"{self.decoder}.bias", prefix)] = state["head.proj.bias"].clone()


NO_POOLER = {"pooler.": "this head has no pooler (transformers' class has none, or only for the next-sentence head)"}
HEADS = {
    "none": HeadLayout("none", pooler="pooler.dense", activation="tanh", pooler_optional=True, bare=True),
    "lm": MaskedLMLayout("lm", dense="~cls.predictions.transform.dense", norm="~cls.predictions.transform.LayerNorm",
                         bias="~cls.predictions.bias", decoder="~cls.predictions.decoder",
                         unused={**NO_POOLER, "cls.seq_relationship": "the next-sentence head is not used"}),
    "classifier": HeadLayout("classifier", proj="~classifier", pooler="pooler.dense", activation="tanh",
                             labelled=True),
    "token_classifier": HeadLayout("token_classifier", proj="~classifier", labelled=True, unused=NO_POOLER),
    "qa": HeadLayout("qa", proj="~qa_outputs", proj_rows=2, unused=NO_POOLER),
}


@FAMILIES.register("bert")
class Bert(HeadedFamily):
    model_type = "bert"
    architecture = "BertForMaskedLM"
    class_prefix = "Bert"
    lm_suffixes = ("ForMaskedLM", "ForPreTraining")
    prefixes = ("bert.",)
    heads = HEADS

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        require(hf, "bert", {
            "position_embedding_type": (hf.get("position_embedding_type", "absolute"), "absolute"),
            "is_decoder": (hf.get("is_decoder", False), False),
            "add_cross_attention": (hf.get("add_cross_attention", False), False),
        })
        vocab = hf["vocab_size"]
        return ModelConfig(
            arch="encoder", vocab_size=vocab, d_model=hf["hidden_size"], n_layers=hf["num_hidden_layers"],
            n_heads=hf["num_attention_heads"], d_ff=hf["intermediate_size"],
            activation=hf_activation(hf.get("hidden_act", "gelu"), "bert"), norm="layernorm",
            norm_eps=hf.get("layer_norm_eps", 1e-12), norm_placement="post", final_norm=False, embed_norm=True,
            positional="learned", max_seq_len=hf["max_position_embeddings"],
            type_vocab_size=hf.get("type_vocab_size", 2), dropout=hf.get("hidden_dropout_prob", 0.1),
            attn_dropout=hf.get("attention_probs_dropout_prob", 0.1), bias=True,
            pad_id=special_id(hf, "pad_token_id", vocab, 0), bos_id=special_id(hf, "bos_token_id", vocab, 1),
            eos_id=special_id(hf, "eos_token_id", vocab, 2), **self.head_config(hf),
        )

    def lm_config(self, hf: Mapping[str, Any]) -> dict[str, Any]:
        return {"head_transform": True, "head_bias": True, "tie_embeddings": hf.get("tie_word_embeddings", True)}

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        unsupported(cfg, "bert", {
            "arch": (cfg.arch, "encoder"), "norm": (cfg.norm, "layernorm"), "norm_placement": (cfg.norm_placement, "post"),
            "use_final_norm": (uses_final_norm(cfg), False), "embed_norm": (cfg.embed_norm, True),
            "embed_scale": (cfg.embed_scale, False), "positional": (cfg.positional, "learned"),
            "pos_offset": (cfg.pos_offset, 0), "bias": (cfg.bias, True), "n_kv_heads": (cfg.kv_heads, cfg.n_heads),
            "activation is plain": (cfg.activation in ZOO_TO_HF_ACTIVATION, True), "residual": (cfg.residual, True),
            "ffn": (cfg.ffn, "mlp"), "type_vocab_size >= 1": (cfg.type_vocab_size >= 1, True),
        })
        return {
            "model_type": "bert", **self.head_to_hf(cfg),
            "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
            "num_attention_heads": cfg.n_heads, "intermediate_size": cfg.ffn_dim,
            "hidden_act": ZOO_TO_HF_ACTIVATION[cfg.activation], "layer_norm_eps": cfg.norm_eps,
            "max_position_embeddings": cfg.max_seq_len, "type_vocab_size": cfg.type_vocab_size,
            "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
            "pad_token_id": cfg.pad_id, "tie_word_embeddings": cfg.tie_embeddings,
            # BertConfig has no bos/eos of its own but keeps these (as RoBERTa's and DistilBERT's do), so a model
            # whose bos is [CLS] (101, a BERT tokenizer's) reads back as itself
            "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id,
        }

    def base_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        for key in [k for k in src.tensors if k.endswith((".gamma", ".beta"))]:  # TF-era LayerNorm names
            src.tensors[key.rsplit(".", 1)[0] + (".weight" if key.endswith("gamma") else ".bias")] = src.tensors.pop(key)
        return encoder_from_hf(src, cfg)

    def base_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str) -> dict[str, torch.Tensor]:
        return encoder_to_hf(state, cfg, prefix)
