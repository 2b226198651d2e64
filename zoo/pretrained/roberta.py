"""RoBERTa and XLM-RoBERTa: BERT's encoder (post-LN, LayerNorm after the embeddings, token types) with learned
positions that count only real tokens, starting at row pad_id + 1 (`pos_offset`, `pos_skip_pads`); the masked-LM
head always uses GELU; the classification head is a tanh dense on <s> then `out_proj` (zoo's classifier with a
tanh pooler); token classification and question answering as BERT's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.feedforward import plain_activation
from zoo.modules.residual import uses_final_norm
from zoo.pretrained.bert import NO_POOLER, MaskedLMLayout, encoder_from_hf, encoder_to_hf
from zoo.pretrained.family import (
    FAMILIES,
    ZOO_TO_HF_ACTIVATION,
    HFTensors,
    hf_activation,
    require,
    special_id,
    unsupported,
)
from zoo.pretrained.heads import HeadedFamily, HeadLayout

GELU = plain_activation("gelu").fn  # RobertaLMHead's activation, whatever hidden_act says
HEADS = {
    "none": HeadLayout("none", pooler="pooler.dense", activation="tanh", pooler_optional=True, bare=True),
    "lm": MaskedLMLayout("lm", dense="~lm_head.dense", norm="~lm_head.layer_norm", bias="~lm_head.bias",
                         decoder="~lm_head.decoder", unused=NO_POOLER),
    "classifier": HeadLayout("classifier", proj="~classifier.out_proj", pooler="~classifier.dense", activation="tanh",
                             labelled=True, unused=NO_POOLER),
    "token_classifier": HeadLayout("token_classifier", proj="~classifier", labelled=True, unused=NO_POOLER),
    "qa": HeadLayout("qa", proj="~qa_outputs", proj_rows=2, unused=NO_POOLER),
}


@FAMILIES.register("roberta")
class Roberta(HeadedFamily):
    model_type = "roberta"
    architecture = "RobertaForMaskedLM"
    class_prefix = "Roberta"
    prefixes = ("roberta.",)
    heads = HEADS

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        name, vocab, pad = self.model_type, hf["vocab_size"], hf.get("pad_token_id")
        require(hf, name, {
            "position_embedding_type": (hf.get("position_embedding_type", "absolute"), "absolute"),
            "is_decoder": (hf.get("is_decoder", False), False),
            "add_cross_attention": (hf.get("add_cross_attention", False), False),
            "pad_token_id is a token id": (isinstance(pad, int) and 0 <= pad < vocab, True),
            "max_position_embeddings > pad_token_id + 1": (hf["max_position_embeddings"] > (pad or 0) + 1, True),
        })
        return ModelConfig(
            arch="encoder", vocab_size=vocab, d_model=hf["hidden_size"], n_layers=hf["num_hidden_layers"],
            n_heads=hf["num_attention_heads"], d_ff=hf["intermediate_size"],
            activation=hf_activation(hf.get("hidden_act", "gelu"), name), norm="layernorm",
            norm_eps=hf.get("layer_norm_eps", 1e-12), norm_placement="post", final_norm=False,
            embed_norm=True, positional="learned", pos_offset=pad + 1, pos_skip_pads=True,
            max_seq_len=hf["max_position_embeddings"] - pad - 1, type_vocab_size=hf.get("type_vocab_size", 2),
            dropout=hf.get("hidden_dropout_prob", 0.1), attn_dropout=hf.get("attention_probs_dropout_prob", 0.1),
            bias=True, pad_id=pad, bos_id=special_id(hf, "bos_token_id", vocab, 0),
            eos_id=special_id(hf, "eos_token_id", vocab, 2), **self.head_config(hf),
        )

    def lm_config(self, hf: Mapping[str, Any]) -> dict[str, Any]:
        activation = hf_activation(hf.get("hidden_act", "gelu"), self.model_type)
        return {"head_transform": True, "head_bias": True, "tie_embeddings": hf.get("tie_word_embeddings", True),
                "head_activation": None if activation == "gelu" else "gelu"}  # RobertaLMHead's fixed gelu

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        unsupported(cfg, self.model_type, {
            "arch": (cfg.arch, "encoder"), "norm": (cfg.norm, "layernorm"), "norm_placement": (cfg.norm_placement, "post"),
            "use_final_norm": (uses_final_norm(cfg), False), "embed_norm": (cfg.embed_norm, True),
            "embed_scale": (cfg.embed_scale, False), "positional": (cfg.positional, "learned"),
            "pos_skip_pads": (cfg.pos_skip_pads, True), "pos_offset": (cfg.pos_offset, cfg.pad_id + 1),
            "bias": (cfg.bias, True), "n_kv_heads": (cfg.kv_heads, cfg.n_heads),
            "activation is plain": (cfg.activation in ZOO_TO_HF_ACTIVATION, True), "residual": (cfg.residual, True),
            "ffn": (cfg.ffn, "mlp"), "type_vocab_size >= 1": (cfg.type_vocab_size >= 1, True),
        })
        return {
            "model_type": self.model_type, **self.head_to_hf(cfg),
            "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
            "num_attention_heads": cfg.n_heads, "intermediate_size": cfg.ffn_dim,
            "hidden_act": ZOO_TO_HF_ACTIVATION[cfg.activation], "layer_norm_eps": cfg.norm_eps,
            "max_position_embeddings": cfg.max_seq_len + cfg.pos_offset, "type_vocab_size": cfg.type_vocab_size,
            "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
            "pad_token_id": cfg.pad_id, "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id,
            "tie_word_embeddings": cfg.tie_embeddings,
        }

    def base_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        return encoder_from_hf(src, cfg)

    def base_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str) -> dict[str, torch.Tensor]:
        return encoder_to_hf(state, cfg, prefix)


@FAMILIES.register("xlm-roberta")
class XLMRoberta(Roberta):
    """The same layout and conversions under XLM-RoBERTa's names (a larger vocabulary in practice)."""

    model_type = "xlm-roberta"
    architecture = "XLMRobertaForMaskedLM"
    class_prefix = "XLMRoberta"
