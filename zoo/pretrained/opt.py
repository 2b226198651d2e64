"""OPT: decoder, learned positions offset by 2, LayerNorm pre-norm (`do_layer_norm_before`) or post-norm,
ReLU, biases, tied head. A final LayerNorm exists only with pre-norm, unless `_remove_final_layer_norm`.
transformers reads OPT's positions from the mask (cumsum - 1); zoo's default 0..T-1 agrees at every real
token of an unpadded or right-padded batch, and left-padded batches pass position_ids = cumsum(mask) - 1.
Heads as the folder's class says: OPTModel (`decoder.*`), OPTForCausalLM, OPTForSequenceClassification (`score`),
OPTForQuestionAnswering (`qa_outputs`); transformers has no OPTForTokenClassification."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.residual import uses_final_norm
from zoo.pretrained.decoder_heads import LM, QA, SCORE
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

POS_OFFSET = 2  # OPTLearnedPositionalEmbedding reads row position + 2
_WIRING = {True: "pre", False: "post"}  # do_layer_norm_before -> norm_placement
_LAYER = {  # zoo sub-module -> HF sub-module inside `layers.{i}.` (q/k/v fused apart)
    "self_attn.o": "self_attn.out_proj",
    "ffn.up": "fc1",
    "ffn.down": "fc2",
    "norm_self": "self_attn_layer_norm",
    "norm_ffn": "final_layer_norm",
}


@FAMILIES.register("opt")
class OPT(HeadedFamily):
    model_type = "opt"
    architecture = "OPTForCausalLM"
    class_prefix = "OPT"
    lm_suffixes = ("ForCausalLM",)
    prefixes = ("model.decoder.", "decoder.")  # OPTForCausalLM; OPTModel (and the original facebook/opt-* files)
    heads = {"none": HeadLayout("none", prefix="decoder."), "lm": LM, "classifier": SCORE, "qa": QA}

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        d = hf["hidden_size"]
        require(hf, "opt", {
            "word_embed_proj_dim (token width apart from hidden_size: project_in/project_out)":
                (hf.get("word_embed_proj_dim") or d, d),
            "enable_bias": (hf.get("enable_bias", True), True),  # False keeps LayerNorm biases: no zoo knob
            "layer_norm_elementwise_affine": (hf.get("layer_norm_elementwise_affine", True), True),
        })
        pre = bool(hf.get("do_layer_norm_before", True))
        vocab = hf["vocab_size"]
        return ModelConfig(
            arch="decoder", vocab_size=vocab, d_model=d, n_layers=hf["num_hidden_layers"],
            n_heads=hf["num_attention_heads"], d_ff=hf["ffn_dim"],
            activation=hf_activation(hf.get("activation_function", "relu"), "opt"), norm="layernorm", norm_eps=1e-5,
            norm_placement=_WIRING[pre], final_norm=pre and not hf.get("_remove_final_layer_norm", False),
            positional="learned", pos_offset=POS_OFFSET, max_seq_len=hf.get("max_position_embeddings", 2048),
            dropout=hf.get("dropout", 0.1), attn_dropout=hf.get("attention_dropout", 0.0), bias=True,
            tie_embeddings=hf.get("tie_word_embeddings", True),
            pad_id=special_id(hf, "pad_token_id", vocab, 1), bos_id=special_id(hf, "bos_token_id", vocab, 2),
            eos_id=special_id(hf, "eos_token_id", vocab, 2), **self.head_config(hf),
        )

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        final = uses_final_norm(cfg)
        unsupported(cfg, "opt", {
            "arch": (cfg.arch, "decoder"), "norm": (cfg.norm, "layernorm"), "norm_eps": (cfg.norm_eps, 1e-5),
            "norm_placement in (pre, post)": (cfg.norm_placement in _WIRING.values(), True),
            "final_norm with norm_placement='post'": (final and cfg.norm_placement == "post", False),
            "positional": (cfg.positional, "learned"), "pos_offset": (cfg.pos_offset, POS_OFFSET),
            "bias": (cfg.bias, True), "qkv_bias": (cfg.use_qkv_bias, True),
            "activation is plain": (cfg.activation in ZOO_TO_HF_ACTIVATION, True), "n_kv_heads": (cfg.kv_heads, cfg.n_heads),
            "head_dim": (cfg.head_size, cfg.d_model // cfg.n_heads), "embed_norm": (cfg.embed_norm, False),
            "embed_scale": (cfg.embed_scale, False), "type_vocab_size": (cfg.type_vocab_size, 0),
            "head_transform": (cfg.head_transform, False), "head_bias": (cfg.head_bias, False),
            "residual": (cfg.residual, True), "ffn": (cfg.ffn, "mlp"),
        })
        pre = cfg.norm_placement == "pre"
        return {
            "model_type": "opt", **self.head_to_hf(cfg), "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.d_model, "word_embed_proj_dim": cfg.d_model, "num_hidden_layers": cfg.n_layers,
            "num_attention_heads": cfg.n_heads, "ffn_dim": cfg.ffn_dim,
            "activation_function": ZOO_TO_HF_ACTIVATION[cfg.activation], "do_layer_norm_before": pre,
            "_remove_final_layer_norm": pre and not final, "max_position_embeddings": cfg.max_seq_len,
            "enable_bias": True, "layer_norm_elementwise_affine": True, "dropout": cfg.dropout,
            "attention_dropout": cfg.attention_dropout, "tie_word_embeddings": cfg.tie_embeddings,
            "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id, "pad_token_id": cfg.pad_id,
        }

    def base_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        d, f, v = cfg.d_model, cfg.ffn_dim, cfg.vocab_size
        shapes = {"self_attn.o": (d, d), "ffn.up": (f, d), "ffn.down": (d, f), "norm_self": (d,), "norm_ffn": (d,)}
        out = {"embed.tokens.weight": src.take("embed_tokens.weight", (v, d)),
               "embed.positional.table.weight": src.take("embed_positions.weight", (cfg.max_seq_len + POS_OFFSET, d))}
        for i in range(cfg.n_layers):
            z, h = f"decoder_stack.layers.{i}", f"layers.{i}"
            for part, shape in (("weight", (d, d)), ("bias", (d,))):  # rows [q | k | v]
                qkv = [src.take(f"{h}.self_attn.{p}_proj.{part}", shape) for p in "qkv"]
                out[f"{z}.self_attn.qkv.{part}"] = torch.cat(qkv)
            for zoo_name, hf_name in _LAYER.items():
                shape = shapes[zoo_name]
                out[f"{z}.{zoo_name}.weight"] = src.take(f"{h}.{hf_name}.weight", shape)
                out[f"{z}.{zoo_name}.bias"] = src.take(f"{h}.{hf_name}.bias", shape[:1])
        if uses_final_norm(cfg):
            out["decoder_stack.final_norm.weight"] = src.take("final_layer_norm.weight", (d,))
            out["decoder_stack.final_norm.bias"] = src.take("final_layer_norm.bias", (d,))
        return out

    def base_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str) -> dict[str, torch.Tensor]:
        out = {f"{prefix}embed_tokens.weight": state["embed.tokens.weight"],
               f"{prefix}embed_positions.weight": state["embed.positional.table.weight"]}
        for i in range(cfg.n_layers):
            z, h = f"decoder_stack.layers.{i}", f"{prefix}layers.{i}"
            for part in ("weight", "bias"):
                for name, chunk in zip("qkv", state[f"{z}.self_attn.qkv.{part}"].chunk(3), strict=True):
                    out[f"{h}.self_attn.{name}_proj.{part}"] = chunk
                for zoo_name, hf_name in _LAYER.items():
                    out[f"{h}.{hf_name}.{part}"] = state[f"{z}.{zoo_name}.{part}"]
        if uses_final_norm(cfg):
            out[f"{prefix}final_layer_norm.weight"] = state["decoder_stack.final_norm.weight"]
            out[f"{prefix}final_layer_norm.bias"] = state["decoder_stack.final_norm.bias"]
        return out
