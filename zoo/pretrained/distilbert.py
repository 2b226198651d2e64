"""DistilBERT: BERT's post-LN encoder without token types or pooler, every LayerNorm at eps 1e-12, learned
positions, masked-LM head `vocab_transform` (the FFN's activation) + `vocab_layer_norm` + `vocab_projector`.
`sinusoidal_pos_embds` only initialises the stored position table, which transformers then reads like any
learned one, so such checkpoints load as `learned` with that table."""

from __future__ import annotations

from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.feedforward import plain_activation
from zoo.modules.residual import uses_final_norm
from zoo.pretrained.bert import EncoderLayout, _linear
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

EPS = 1e-12  # fixed in DistilBERT's code, not in config.json
LAYOUT = EncoderLayout(
    "transformer.layer", ("attention.q_lin", "attention.k_lin", "attention.v_lin"),
    {"self_attn.o": "attention.out_lin", "norm_self": "sa_layer_norm", "ffn.up": "ffn.lin1", "ffn.down": "ffn.lin2",
     "norm_ffn": "output_layer_norm"},
)


@FAMILIES.register("distilbert")
class DistilBert(Family):
    model_type = "distilbert"
    architecture = "DistilBertForMaskedLM"
    prefixes = ("distilbert.",)

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        architectures = hf.get("architectures") or [self.architecture]
        require(hf, "distilbert", {
            # DistilBertForSequenceClassification pools with ReLU; zoo's classifier head pools with tanh (BERT).
            "architectures": (architectures, [self.architecture]),
        })
        vocab = hf["vocab_size"]
        return ModelConfig(
            arch="encoder", vocab_size=vocab, d_model=hf["dim"], n_layers=hf["n_layers"], n_heads=hf["n_heads"],
            d_ff=hf["hidden_dim"], activation=hf_activation(hf.get("activation", "gelu"), "distilbert"),
            norm="layernorm", norm_eps=EPS, norm_placement="post", final_norm=False, embed_norm=True,
            positional="learned", max_seq_len=hf["max_position_embeddings"], type_vocab_size=0,
            dropout=hf.get("dropout", 0.1), attn_dropout=hf.get("attention_dropout", 0.1), bias=True,
            head_transform=True, head_bias=True, tie_embeddings=hf.get("tie_word_embeddings", True),
            pad_id=special_id(hf, "pad_token_id", vocab, 0), bos_id=special_id(hf, "bos_token_id", vocab, 1),
            eos_id=special_id(hf, "eos_token_id", vocab, 2),
        )

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        head_fn = plain_activation(cfg.head_activation or cfg.activation).fn
        unsupported(cfg, "distilbert", {
            "arch": (cfg.arch, "encoder"), "head": (cfg.head, "lm"), "norm": (cfg.norm, "layernorm"),
            "norm_eps": (cfg.norm_eps, EPS), "norm_placement": (cfg.norm_placement, "post"),
            "use_final_norm": (uses_final_norm(cfg), False), "embed_norm": (cfg.embed_norm, True),
            "embed_scale": (cfg.embed_scale, False), "positional": (cfg.positional, "learned"),
            "pos_offset": (cfg.pos_offset, 0), "pos_skip_pads": (cfg.pos_skip_pads, False), "bias": (cfg.bias, True),
            "n_kv_heads": (cfg.kv_heads, cfg.n_heads), "residual": (cfg.residual, True), "ffn": (cfg.ffn, "mlp"),
            "activation is plain": (cfg.activation in ZOO_TO_HF_ACTIVATION, True),
            "type_vocab_size": (cfg.type_vocab_size, 0), "head_transform": (cfg.head_transform, True),
            "head_bias": (cfg.head_bias, True),
            "head_activation is activation": (head_fn is plain_activation(cfg.activation).fn, True),
        })
        return {
            "model_type": "distilbert", "architectures": [self.architecture], "vocab_size": cfg.vocab_size,
            "dim": cfg.d_model, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "hidden_dim": cfg.ffn_dim,
            "activation": ZOO_TO_HF_ACTIVATION[cfg.activation], "max_position_embeddings": cfg.max_seq_len,
            "sinusoidal_pos_embds": False, "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
            "pad_token_id": cfg.pad_id, "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id,
            "tie_word_embeddings": cfg.tie_embeddings,
        }

    def state_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        d, v = cfg.d_model, cfg.vocab_size
        out = {
            "embed.tokens.weight": src.take("embeddings.word_embeddings.weight", (v, d)),
            "embed.positional.table.weight": src.take("embeddings.position_embeddings.weight", (cfg.max_seq_len, d)),
        }
        out["embed.norm.weight"], out["embed.norm.bias"] = _linear(src, "embeddings.LayerNorm", d)
        src.discard("embeddings.position_ids")
        LAYOUT.from_hf(src, cfg, out)
        out["head.transform.weight"], out["head.transform.bias"] = _linear(src, "~vocab_transform", d, d)
        out["head.transform_norm.weight"], out["head.transform_norm.bias"] = _linear(src, "~vocab_layer_norm", d)
        out["head.proj.bias"] = src.take("~vocab_projector.bias", (v,))
        if cfg.tie_embeddings:
            src.discard("~vocab_projector.weight")
            out["head.proj.weight"] = out["embed.tokens.weight"]
        else:
            out["head.proj.weight"] = src.take("~vocab_projector.weight", (v, d))
        src.finish()
        return out

    def state_to_hf(self, state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
        out = {
            "distilbert.embeddings.word_embeddings.weight": state["embed.tokens.weight"],
            "distilbert.embeddings.position_embeddings.weight": state["embed.positional.table.weight"],
            "distilbert.embeddings.LayerNorm.weight": state["embed.norm.weight"],
            "distilbert.embeddings.LayerNorm.bias": state["embed.norm.bias"],
        }
        LAYOUT.to_hf(state, cfg, "distilbert.", out)
        for part in ("weight", "bias"):
            out[f"vocab_transform.{part}"] = state[f"head.transform.{part}"]
            out[f"vocab_layer_norm.{part}"] = state[f"head.transform_norm.{part}"]
        out["vocab_projector.bias"] = state["head.proj.bias"]
        if not cfg.tie_embeddings:
            out["vocab_projector.weight"] = state["head.proj.weight"]
        return out
