"""DistilBERT: BERT's post-LN encoder without token types or pooler, every LayerNorm at eps 1e-12, learned
positions, masked-LM head `vocab_transform` (the FFN's activation) + `vocab_layer_norm` + `vocab_projector`.
`sinusoidal_pos_embds` only initialises the stored position table, which transformers then reads like any
learned one, so such checkpoints load as `learned` with that table. Heads: DistilBertModel (no pooler), masked LM,
sequence classification (`pre_classifier` + ReLU on the first token, then `classifier`), token classification,
question answering."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.residual import uses_final_norm
from zoo.pretrained.bert import EncoderLayout, MaskedLMLayout, _linear
from zoo.pretrained.family import (
    FAMILIES,
    ZOO_TO_HF_ACTIVATION,
    HFTensors,
    hf_activation,
    special_id,
    unsupported,
)
from zoo.pretrained.heads import HeadedFamily, HeadLayout

EPS = 1e-12  # fixed in DistilBERT's code, not in config.json
LAYOUT = EncoderLayout(
    "transformer.layer", ("attention.q_lin", "attention.k_lin", "attention.v_lin"),
    {"self_attn.o": "attention.out_lin", "norm_self": "sa_layer_norm", "ffn.up": "ffn.lin1", "ffn.down": "ffn.lin2",
     "norm_ffn": "output_layer_norm"},
)


HEADS = {
    "none": HeadLayout("none", bare=True),
    "lm": MaskedLMLayout("lm", dense="~vocab_transform", norm="~vocab_layer_norm", bias="~vocab_projector.bias",
                         decoder="~vocab_projector"),
    "classifier": HeadLayout("classifier", proj="~classifier", pooler="~pre_classifier", activation="relu",
                             labelled=True),
    "token_classifier": HeadLayout("token_classifier", proj="~classifier", labelled=True),
    "qa": HeadLayout("qa", proj="~qa_outputs", proj_rows=2),
}


@FAMILIES.register("distilbert")
class DistilBert(HeadedFamily):
    model_type = "distilbert"
    architecture = "DistilBertForMaskedLM"
    class_prefix = "DistilBert"
    prefixes = ("distilbert.",)
    heads = HEADS

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        vocab = hf["vocab_size"]
        return ModelConfig(
            arch="encoder", vocab_size=vocab, d_model=hf["dim"], n_layers=hf["n_layers"], n_heads=hf["n_heads"],
            d_ff=hf["hidden_dim"], activation=hf_activation(hf.get("activation", "gelu"), "distilbert"),
            norm="layernorm", norm_eps=EPS, norm_placement="post", final_norm=False, embed_norm=True,
            positional="learned", max_seq_len=hf["max_position_embeddings"], type_vocab_size=0,
            dropout=hf.get("dropout", 0.1), attn_dropout=hf.get("attention_dropout", 0.1), bias=True,
            pad_id=special_id(hf, "pad_token_id", vocab, 0), bos_id=special_id(hf, "bos_token_id", vocab, 1),
            eos_id=special_id(hf, "eos_token_id", vocab, 2), **self.head_config(hf),
        )

    def lm_config(self, hf: Mapping[str, Any]) -> dict[str, Any]:
        return {"head_transform": True, "head_bias": True, "tie_embeddings": hf.get("tie_word_embeddings", True)}

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        unsupported(cfg, "distilbert", {
            "arch": (cfg.arch, "encoder"), "norm": (cfg.norm, "layernorm"),
            "norm_eps": (cfg.norm_eps, EPS), "norm_placement": (cfg.norm_placement, "post"),
            "use_final_norm": (uses_final_norm(cfg), False), "embed_norm": (cfg.embed_norm, True),
            "embed_scale": (cfg.embed_scale, False), "positional": (cfg.positional, "learned"),
            "pos_offset": (cfg.pos_offset, 0), "pos_skip_pads": (cfg.pos_skip_pads, False), "bias": (cfg.bias, True),
            "n_kv_heads": (cfg.kv_heads, cfg.n_heads), "residual": (cfg.residual, True), "ffn": (cfg.ffn, "mlp"),
            "activation is plain": (cfg.activation in ZOO_TO_HF_ACTIVATION, True),
            "type_vocab_size": (cfg.type_vocab_size, 0),
        })
        return {
            "model_type": "distilbert", **self.head_to_hf(cfg), "vocab_size": cfg.vocab_size,
            "dim": cfg.d_model, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "hidden_dim": cfg.ffn_dim,
            "activation": ZOO_TO_HF_ACTIVATION[cfg.activation], "max_position_embeddings": cfg.max_seq_len,
            "sinusoidal_pos_embds": False, "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
            "pad_token_id": cfg.pad_id, "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id,
            "tie_word_embeddings": cfg.tie_embeddings,
        }

    def base_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        d, v = cfg.d_model, cfg.vocab_size
        out = {
            "embed.tokens.weight": src.take("embeddings.word_embeddings.weight", (v, d)),
            "embed.positional.table.weight": src.take("embeddings.position_embeddings.weight", (cfg.max_seq_len, d)),
        }
        out["embed.norm.weight"], out["embed.norm.bias"] = _linear(src, "embeddings.LayerNorm", d)
        LAYOUT.from_hf(src, cfg, out)
        return out

    def base_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str) -> dict[str, torch.Tensor]:
        out = {
            f"{prefix}embeddings.word_embeddings.weight": state["embed.tokens.weight"],
            f"{prefix}embeddings.position_embeddings.weight": state["embed.positional.table.weight"],
            f"{prefix}embeddings.LayerNorm.weight": state["embed.norm.weight"],
            f"{prefix}embeddings.LayerNorm.bias": state["embed.norm.bias"],
        }
        LAYOUT.to_hf(state, cfg, prefix, out)
        return out
