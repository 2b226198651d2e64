"""GPT-2: decoder, learned positions, pre-LN, tanh-GELU, tied head. HF stores Conv1D weights as
(in, out), the transpose of nn.Linear's (out, in). Heads as the folder's class says: GPT2Model, GPT2LMHeadModel,
GPT2ForSequenceClassification (`score`), GPT2ForTokenClassification (`classifier`), GPT2ForQuestionAnswering."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.residual import uses_final_norm
from zoo.pretrained.decoder_heads import BARE, LM, QA, SCORE, token_classifier
from zoo.pretrained.family import (
    FAMILIES,
    ZOO_TO_HF_ACTIVATION,
    HFTensors,
    hf_activation,
    require,
    special_id,
    unsupported,
)
from zoo.pretrained.heads import HeadedFamily

# zoo sub-module -> GPT-2 sub-module inside `h.{i}.`; Conv1D ones are transposed
_LAYER = {
    "self_attn.qkv": "attn.c_attn",
    "self_attn.o": "attn.c_proj",
    "ffn.up": "mlp.c_fc",
    "ffn.down": "mlp.c_proj",
    "norm_self": "ln_1",
    "norm_ffn": "ln_2",
}
_CONV1D = {"self_attn.qkv", "self_attn.o", "ffn.up", "ffn.down"}


@FAMILIES.register("gpt2")
class GPT2(HeadedFamily):
    model_type = "gpt2"
    architecture = "GPT2LMHeadModel"
    class_prefix = "GPT2"
    lm_suffixes = ("LMHeadModel",)
    prefixes = ("transformer.",)
    heads = {"none": BARE, "lm": LM, "classifier": SCORE, "token_classifier": token_classifier("~classifier"),
             "qa": QA}
    not_loaded = {"GPT2DoubleHeadsModel": "its multiple-choice head is not a zoo head"}

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        require(hf, "gpt2", {
            "scale_attn_weights": (hf.get("scale_attn_weights", True), True),
            "scale_attn_by_inverse_layer_idx": (hf.get("scale_attn_by_inverse_layer_idx", False), False),
            "add_cross_attention": (hf.get("add_cross_attention", False), False),
        })
        vocab = hf["vocab_size"]
        eos = special_id(hf, "eos_token_id", vocab, 0)
        return ModelConfig(
            arch="decoder", vocab_size=vocab, d_model=hf["n_embd"], n_layers=hf["n_layer"], n_heads=hf["n_head"],
            d_ff=hf.get("n_inner") or 4 * hf["n_embd"],
            activation=hf_activation(hf.get("activation_function", "gelu_new"), "gpt2"),
            norm="layernorm", norm_eps=hf.get("layer_norm_epsilon", 1e-5), norm_placement="pre",
            positional="learned", max_seq_len=hf["n_positions"],
            dropout=hf.get("resid_pdrop", 0.1), attn_dropout=hf.get("attn_pdrop", 0.1), bias=True,
            tie_embeddings=hf.get("tie_word_embeddings", True),
            pad_id=special_id(hf, "pad_token_id", vocab, eos), bos_id=special_id(hf, "bos_token_id", vocab, eos),
            eos_id=eos, **self.head_config(hf),
        )

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        unsupported(cfg, "gpt2", {
            "arch": (cfg.arch, "decoder"), "norm": (cfg.norm, "layernorm"), "norm_placement": (cfg.norm_placement, "pre"),
            "positional": (cfg.positional, "learned"), "pos_offset": (cfg.pos_offset, 0), "bias": (cfg.bias, True),
            "activation is plain": (cfg.activation in ZOO_TO_HF_ACTIVATION, True), "n_kv_heads": (cfg.kv_heads, cfg.n_heads),
            "use_final_norm": (uses_final_norm(cfg), True), "embed_norm": (cfg.embed_norm, False),
            "embed_scale": (cfg.embed_scale, False), "type_vocab_size": (cfg.type_vocab_size, 0),
            "head_transform": (cfg.head_transform, False), "head_bias": (cfg.head_bias, False),
            "residual": (cfg.residual, True), "ffn": (cfg.ffn, "mlp"),
        })
        return {
            "model_type": "gpt2", **self.head_to_hf(cfg), "vocab_size": cfg.vocab_size,
            "n_embd": cfg.d_model, "n_layer": cfg.n_layers, "n_head": cfg.n_heads, "n_inner": cfg.ffn_dim,
            "n_positions": cfg.max_seq_len, "activation_function": ZOO_TO_HF_ACTIVATION[cfg.activation],
            "layer_norm_epsilon": cfg.norm_eps, "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout,
            "attn_pdrop": cfg.attention_dropout, "tie_word_embeddings": cfg.tie_embeddings,
            "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id, "pad_token_id": cfg.pad_id,
        }

    def base_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        d, f, v = cfg.d_model, cfg.ffn_dim, cfg.vocab_size
        shapes = {"self_attn.qkv": (d, 3 * d), "self_attn.o": (d, d), "ffn.up": (d, f), "ffn.down": (f, d)}
        out = {"embed.tokens.weight": src.take("wte.weight", (v, d)),
               "embed.positional.table.weight": src.take("wpe.weight", (cfg.max_seq_len, d))}
        for i in range(cfg.n_layers):
            for zoo_name, hf_name in _LAYER.items():
                z, h = f"decoder_stack.layers.{i}.{zoo_name}", f"h.{i}.{hf_name}"
                if zoo_name in _CONV1D:
                    weight_shape = shapes[zoo_name]
                    out[f"{z}.weight"] = src.take(f"{h}.weight", weight_shape).t().contiguous()
                    out[f"{z}.bias"] = src.take(f"{h}.bias", weight_shape[1:])
                else:
                    out[f"{z}.weight"], out[f"{z}.bias"] = src.take(f"{h}.weight", (d,)), src.take(f"{h}.bias", (d,))
        out["decoder_stack.final_norm.weight"] = src.take("ln_f.weight", (d,))
        out["decoder_stack.final_norm.bias"] = src.take("ln_f.bias", (d,))
        return out

    def base_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str) -> dict[str, torch.Tensor]:
        out = {f"{prefix}wte.weight": state["embed.tokens.weight"],
               f"{prefix}wpe.weight": state["embed.positional.table.weight"],
               f"{prefix}ln_f.weight": state["decoder_stack.final_norm.weight"],
               f"{prefix}ln_f.bias": state["decoder_stack.final_norm.bias"]}
        for i in range(cfg.n_layers):
            for zoo_name, hf_name in _LAYER.items():
                z, h = f"decoder_stack.layers.{i}.{zoo_name}", f"{prefix}h.{i}.{hf_name}"
                weight = state[f"{z}.weight"]
                out[f"{h}.weight"] = weight.t() if zoo_name in _CONV1D else weight
                out[f"{h}.bias"] = state[f"{z}.bias"]
        return out
