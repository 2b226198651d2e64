"""The BERT-kind encoders: post-LN, learned positions, a LayerNorm after the embeddings, and the head the
folder's class says: the bare model (BERT's and RoBERTa's with a pooler), masked LM (dense, activation,
LayerNorm, tied decoder with bias), sequence / token classification, question answering (each family's
`heads`). BERT: token types, eps 1e-12. RoBERTa and XLM-RoBERTa: positions that count only real tokens,
starting at row pad_id + 1 (`model.positional: {name: learned, offset: pad_id + 1, skip_pads: true}`); the
masked-LM head always uses GELU; the classifier is a tanh dense on <s> then `out_proj`. DistilBERT: no token
types, no pooler, every LayerNorm at eps 1e-12, the classifier a ReLU `pre_classifier` then `classifier`;
`sinusoidal_pos_embds` only initialises the stored position table, which transformers then reads like any
learned one, so such checkpoints load as `learned` with that table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.pretrained.config_map import PLAIN, Key
from zoo.pretrained.family import Checks, Family
from zoo.pretrained.heads import HeadLayout
from zoo.pretrained.tensor_map import HFTensors, load, save, stored_name, within


@dataclass(frozen=True)
class MaskedLMLayout(HeadLayout):
    """A masked-LM head: `dense`, activation, `norm`, then the vocabulary projection, tied to the token table
    unless the config unties it, whose bias is stored as `bias` (and as `decoder`.bias when untied). The
    forward pass adds `decoder`.bias: an alias of `bias` unless transformers 5 untied them
    (tie_word_embeddings=false)."""

    dense: str = ""
    norm: str = ""
    bias: str = ""
    decoder: str = ""

    def config(self, hf: Mapping[str, Any], family: Any) -> dict[str, Any]:
        return {"head": "lm", **family.lm_config(hf)}

    def origins(self) -> dict[str, str]:
        pairs = {"head.transform": self.dense, "head.transform_norm": self.norm}
        out = {f"{z}.{part}": f"{h}.{part}" for z, h in pairs.items() for part in ("weight", "bias")}
        return {**out, "head.proj.bias": self.bias, "head.proj.weight": f"{self.decoder}.weight"}

    def from_hf(self, src: HFTensors, cfg: ModelConfig, out: dict[str, torch.Tensor],
                shapes: Mapping[str, tuple[int, ...]]) -> None:
        v = cfg.vocab_size
        transform = {k: h for k, h in self.origins().items() if k.startswith("head.transform")}
        out.update(load(transform, src, shapes, cfg))
        shared_bias, decoder_bias = src.take(self.bias, (v,)), src.take_optional(f"{self.decoder}.bias", (v,))
        out["head.proj.bias"] = shared_bias if decoder_bias is None else decoder_bias
        if cfg.tie_embeddings:
            src.discard(f"{self.decoder}.weight")
            out["head.proj.weight"] = out["embed.tokens.weight"]
        else:
            out["head.proj.weight"] = src.take(f"{self.decoder}.weight", (v, cfg.d_model))

    def to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str
              ) -> dict[str, torch.Tensor]:
        out = save({k: h for k, h in self.origins().items() if k != "head.proj.weight"}, state, cfg, prefix)
        if not cfg.tie_embeddings:  # transformers 5 then unties decoder.weight and decoder.bias too
            out[stored_name(f"{self.decoder}.weight", prefix)] = state["head.proj.weight"]
            out[stored_name(f"{self.decoder}.bias", prefix)] = state["head.proj.bias"].clone()
        return out


def encoder(layers: str, qkv: tuple[str, str, str], names: Mapping[str, str]) -> dict:
    """The tensor map of a BERT-kind encoder whose layers sit under `layers`: q/k/v stacked as zoo's rows,
    `names` the other sub-modules (zoo -> HF)."""
    rows = {"self_attn.qkv.{p}": tuple(f"{n}.{{p}}" for n in qkv),
            **{f"{z}.{{p}}": f"{h}.{{p}}" for z, h in names.items()}}
    return {"embed.tokens.weight": "embeddings.word_embeddings.weight",
            "embed.positional.table.weight": "embeddings.position_embeddings.weight",
            "embed.types.weight": "embeddings.token_type_embeddings.weight",
            "embed.norm.{p}": "embeddings.LayerNorm.{p}",
            **within("encoder_stack.layers.{i}.", f"{layers}.{{i}}.", rows)}


NO_POOLER = {"pooler.": "this head has no pooler (transformers' class has none, or only for the "
                        "next-sentence head)"}
POOLED = HeadLayout("none", pooler="pooler.dense", activation="tanh", pooler_optional=True, bare=True)
TOKENS = HeadLayout("token_classifier", proj="~classifier", labelled=True)
QA = HeadLayout("qa", proj="~qa_outputs")
ENCODER = {"arch": "encoder", "norm": "layernorm", "norm_placement": "post", "final_norm": False,
           "embed_norm": True, "positional": "learned", "bias": True}
KEYS = (
    Key("vocab_size", "vocab_size"), Key("d_model", "hidden_size"), Key("n_layers", "num_hidden_layers"),
    Key("n_heads", "num_attention_heads"), Key("d_ff", "intermediate_size"),
    Key("activation", "hidden_act", "gelu", PLAIN), Key("norm_eps", "layer_norm_eps", 1e-12),
    Key("max_seq_len", "max_position_embeddings"), Key("type_vocab_size", "type_vocab_size", 2),
    Key("dropout", "hidden_dropout_prob", 0.1), Key("attn_dropout", "attention_probs_dropout_prob", 0.1),
    # BertConfig has no bos/eos of its own but keeps these (as RoBERTa's and DistilBERT's do), so a model
    # whose bos is [CLS] (101, a BERT tokenizer's) reads back as itself
    Key("pad_id", "pad_token_id", 0, token=True), Key("bos_id", "bos_token_id", 1, token=True),
    Key("eos_id", "eos_token_id", 2, token=True),
)


class Bert(Family):
    model_type = "bert"
    class_prefix = "Bert"
    lm_suffixes = ("ForMaskedLM", "ForPreTraining")
    prefixes = ("bert.",)
    heads = {
        "none": POOLED,
        "lm": MaskedLMLayout("lm", dense="~cls.predictions.transform.dense",
                             norm="~cls.predictions.transform.LayerNorm", bias="~cls.predictions.bias",
                             decoder="~cls.predictions.decoder", unused={
                                 **NO_POOLER, "cls.seq_relationship": "the next-sentence head is not used"}),
        "classifier": HeadLayout("classifier", proj="~classifier", pooler="pooler.dense", activation="tanh",
                                 labelled=True),
        "token_classifier": replace(TOKENS, unused=NO_POOLER), "qa": replace(QA, unused=NO_POOLER),
    }
    tensors = encoder("encoder.layer", ("attention.self.query", "attention.self.key", "attention.self.value"),
                      {"self_attn.o": "attention.output.dense", "norm_self": "attention.output.LayerNorm",
                       "ffn.up": "intermediate.dense", "ffn.down": "output.dense",
                       "norm_ffn": "output.LayerNorm"})
    keys = KEYS
    fixed = ENCODER
    requires = {"position_embedding_type": "absolute", "is_decoder": False, "add_cross_attention": False}

    def lm_config(self, hf: Mapping[str, Any]) -> dict[str, Any]:
        return {"head.transform": True, "head.bias": True,
                "tie_embeddings": hf.get("tie_word_embeddings", True)}

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:  # transformers always adds type 0's embedding
        return {"tie_word_embeddings": cfg.tie_embeddings, "type_vocab_size": max(cfg.type_vocab_size, 1)}


class Roberta(Bert):
    model_type = "roberta"
    class_prefix = "Roberta"
    lm_suffixes = ("ForMaskedLM",)
    prefixes = ("roberta.",)
    heads = {
        "none": POOLED,
        "lm": MaskedLMLayout("lm", dense="~lm_head.dense", norm="~lm_head.layer_norm", bias="~lm_head.bias",
                             decoder="~lm_head.decoder", unused=NO_POOLER),
        "classifier": HeadLayout("classifier", proj="~classifier.out_proj", pooler="~classifier.dense",
                                 activation="tanh", labelled=True, unused=NO_POOLER),
        "token_classifier": replace(TOKENS, unused=NO_POOLER), "qa": replace(QA, unused=NO_POOLER),
    }
    keys = tuple(k for k in KEYS if k.zoo not in ("max_seq_len", "pad_id"))
    defaults = {"bos_token_id": 0}

    def lm_config(self, hf: Mapping[str, Any]) -> dict[str, Any]:
        gelu = PLAIN.get(hf.get("hidden_act", "gelu")) == "gelu"  # RobertaLMHead's gelu, whatever hidden_act
        return {**super().lm_config(hf), "head.activation": None if gelu else "gelu"}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        pad, positions = hf.get("pad_token_id"), hf["max_position_embeddings"]
        ok = isinstance(pad, int) and 0 <= pad < settings["vocab_size"]
        pad = pad if ok else 0
        checks = {"pad_token_id is a token id": (ok, True),
                  "max_position_embeddings > pad_token_id + 1": (positions > pad + 1, True)}
        return {"pad_id": pad, "positional.offset": pad + 1, "positional.skip_pads": True,
                "max_seq_len": positions - pad - 1}, checks

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return {**super().more_to_hf(cfg), "max_position_embeddings": cfg.max_seq_len + cfg.positional.offset,
                "pad_token_id": cfg.pad_id}


class XLMRoberta(Roberta):
    """The same layout and conversions under XLM-RoBERTa's names (a larger vocabulary in practice)."""

    model_type = "xlm-roberta"
    class_prefix = "XLMRoberta"


class DistilBert(Bert):
    model_type = "distilbert"
    class_prefix = "DistilBert"
    lm_suffixes = ("ForMaskedLM",)
    prefixes = ("distilbert.",)
    heads = {
        "none": HeadLayout("none", bare=True),
        "lm": MaskedLMLayout("lm", dense="~vocab_transform", norm="~vocab_layer_norm",
                             bias="~vocab_projector.bias", decoder="~vocab_projector"),
        "classifier": HeadLayout("classifier", proj="~classifier", pooler="~pre_classifier",
                                 activation="relu", labelled=True),
        "token_classifier": TOKENS, "qa": QA,
    }
    tensors = encoder("transformer.layer", ("attention.q_lin", "attention.k_lin", "attention.v_lin"),
                      {"self_attn.o": "attention.out_lin", "norm_self": "sa_layer_norm", "ffn.up": "ffn.lin1",
                       "ffn.down": "ffn.lin2", "norm_ffn": "output_layer_norm"})
    keys = (
        Key("vocab_size", "vocab_size"), Key("d_model", "dim"), Key("n_layers", "n_layers"),
        Key("n_heads", "n_heads"), Key("d_ff", "hidden_dim"), Key("activation", "activation", "gelu", PLAIN),
        Key("max_seq_len", "max_position_embeddings"), Key("dropout", "dropout", 0.1),
        Key("attn_dropout", "attention_dropout", 0.1), *KEYS[-3:],
    )
    fixed = {**ENCODER, "norm_eps": 1e-12, "type_vocab_size": 0}  # eps fixed in DistilBERT's code
    requires = {}

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return {"tie_word_embeddings": cfg.tie_embeddings, "sinusoidal_pos_embds": False}
