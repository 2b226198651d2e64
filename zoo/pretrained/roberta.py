"""RoBERTa and XLM-RoBERTa: BERT's encoder (post-LN, LayerNorm after the embeddings, token types) with learned
positions that count only real tokens, starting at row pad_id + 1 (`pos_offset`, `pos_skip_pads`); the masked-LM
head always uses GELU; the classification head is a tanh dense on <s> then `out_proj` (zoo's ClassifierHead)."""

from __future__ import annotations

from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.feedforward import plain_activation
from zoo.modules.residual import uses_final_norm
from zoo.pretrained.bert import _linear, encoder_from_hf, encoder_to_hf, mlm_head_from_hf
from zoo.pretrained.family import (
    FAMILIES,
    ZOO_TO_HF_ACTIVATION,
    Family,
    HFTensors,
    hf_activation,
    require,
    special_id,
    unsupported,
)

GELU = plain_activation("gelu").fn  # RobertaLMHead's activation, whatever hidden_act says
_UNUSED = {"pooler.": "the masked-LM and classification models have no pooler"}


@FAMILIES.register("roberta")
class Roberta(Family):
    model_type = "roberta"
    architecture = "RobertaForMaskedLM"
    classifier = "RobertaForSequenceClassification"
    prefixes = ("roberta.",)

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        name, vocab, pad = self.model_type, hf["vocab_size"], hf.get("pad_token_id")
        architectures, known = hf.get("architectures") or [self.architecture], [self.architecture, self.classifier]
        other_heads = [a for a in architectures if a not in known]  # a bare model, causal LM, token/QA heads, ...
        require(hf, name, {
            "architectures": (other_heads or known, known),
            "position_embedding_type": (hf.get("position_embedding_type", "absolute"), "absolute"),
            "is_decoder": (hf.get("is_decoder", False), False),
            "add_cross_attention": (hf.get("add_cross_attention", False), False),
            "pad_token_id is a token id": (isinstance(pad, int) and 0 <= pad < vocab, True),
            "max_position_embeddings > pad_token_id + 1": (hf["max_position_embeddings"] > (pad or 0) + 1, True),
        })
        classifier = self.classifier in architectures
        activation = hf_activation(hf.get("hidden_act", "gelu"), name)
        return ModelConfig(
            arch="encoder", vocab_size=vocab, d_model=hf["hidden_size"], n_layers=hf["num_hidden_layers"],
            n_heads=hf["num_attention_heads"], d_ff=hf["intermediate_size"], activation=activation,
            norm="layernorm", norm_eps=hf.get("layer_norm_eps", 1e-12), norm_placement="post", final_norm=False,
            embed_norm=True, positional="learned", pos_offset=pad + 1, pos_skip_pads=True,
            max_seq_len=hf["max_position_embeddings"] - pad - 1, type_vocab_size=hf.get("type_vocab_size", 2),
            dropout=hf.get("hidden_dropout_prob", 0.1), attn_dropout=hf.get("attention_probs_dropout_prob", 0.1),
            bias=True, head="classifier" if classifier else "lm",
            num_labels=len(hf.get("id2label") or {0: 0, 1: 1}) if classifier else 0,
            head_transform=not classifier, head_bias=not classifier,
            head_activation=None if classifier or activation == "gelu" else "gelu",  # RobertaLMHead's fixed gelu
            tie_embeddings=hf.get("tie_word_embeddings", True), pad_id=pad,
            bos_id=special_id(hf, "bos_token_id", vocab, 0), eos_id=special_id(hf, "eos_token_id", vocab, 2),
        )

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        lm = cfg.head == "lm"
        unsupported(cfg, self.model_type, {
            "arch": (cfg.arch, "encoder"), "norm": (cfg.norm, "layernorm"), "norm_placement": (cfg.norm_placement, "post"),
            "use_final_norm": (uses_final_norm(cfg), False), "embed_norm": (cfg.embed_norm, True),
            "embed_scale": (cfg.embed_scale, False), "positional": (cfg.positional, "learned"),
            "pos_skip_pads": (cfg.pos_skip_pads, True), "pos_offset": (cfg.pos_offset, cfg.pad_id + 1),
            "bias": (cfg.bias, True), "n_kv_heads": (cfg.kv_heads, cfg.n_heads),
            "activation is plain": (cfg.activation in ZOO_TO_HF_ACTIVATION, True), "residual": (cfg.residual, True),
            "ffn": (cfg.ffn, "mlp"), "type_vocab_size >= 1": (cfg.type_vocab_size >= 1, True),
            **({"head_transform": (cfg.head_transform, True), "head_bias": (cfg.head_bias, True),
                "head_activation is gelu": (plain_activation(cfg.head_activation or cfg.activation).fn is GELU, True)}
               if lm else {}),
        })
        hf = {
            "model_type": self.model_type, "architectures": [self.architecture if lm else self.classifier],
            "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
            "num_attention_heads": cfg.n_heads, "intermediate_size": cfg.ffn_dim,
            "hidden_act": ZOO_TO_HF_ACTIVATION[cfg.activation], "layer_norm_eps": cfg.norm_eps,
            "max_position_embeddings": cfg.max_seq_len + cfg.pos_offset, "type_vocab_size": cfg.type_vocab_size,
            "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
            "pad_token_id": cfg.pad_id, "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id,
            "tie_word_embeddings": cfg.tie_embeddings,
        }
        if not lm:
            hf["id2label"] = {str(i): f"LABEL_{i}" for i in range(cfg.num_labels)}
            hf["label2id"] = {f"LABEL_{i}": i for i in range(cfg.num_labels)}
        return hf

    def state_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        d = cfg.d_model
        out = encoder_from_hf(src, cfg)
        if cfg.head == "classifier":
            out["head.pool.weight"], out["head.pool.bias"] = _linear(src, "~classifier.dense", d, d)
            out["head.proj.weight"], out["head.proj.bias"] = _linear(src, "~classifier.out_proj", cfg.num_labels, d)
            src.finish(_UNUSED)
            return out
        mlm_head_from_hf(src, cfg, out, "~lm_head.dense", "~lm_head.layer_norm", "~lm_head.bias", "~lm_head.decoder")
        src.finish(_UNUSED)
        return out

    def state_to_hf(self, state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
        out = encoder_to_hf(state, cfg, self.prefixes[0])
        if cfg.head == "classifier":
            for part in ("weight", "bias"):
                out[f"classifier.dense.{part}"] = state[f"head.pool.{part}"]
                out[f"classifier.out_proj.{part}"] = state[f"head.proj.{part}"]
            return out
        for part in ("weight", "bias"):
            out[f"lm_head.dense.{part}"] = state[f"head.transform.{part}"]
            out[f"lm_head.layer_norm.{part}"] = state[f"head.transform_norm.{part}"]
        out["lm_head.bias"] = state["head.proj.bias"]
        if not cfg.tie_embeddings:  # transformers 5 then unties decoder.weight and decoder.bias too
            out["lm_head.decoder.weight"] = state["head.proj.weight"]
            out["lm_head.decoder.bias"] = state["head.proj.bias"].clone()
        return out


@FAMILIES.register("xlm-roberta")
class XLMRoberta(Roberta):
    """The same layout and conversions under XLM-RoBERTa's names (a larger vocabulary in practice)."""

    model_type = "xlm-roberta"
    architecture = "XLMRobertaForMaskedLM"
    classifier = "XLMRobertaForSequenceClassification"
