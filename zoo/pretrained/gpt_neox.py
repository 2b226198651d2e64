"""GPT-NeoX (Pythia): decoder, LayerNorm, parallel residual (x + attn(ln1(x)) + mlp(ln2(x))) or pre-norm,
partial rotary (rotate-half on the first `rotary_pct` of each head), biases everywhere, untied `embed_out`.
HF fuses q/k/v per head, rows ordered (head, q|k|v, feature); zoo's `qkv` rows are [q (H*D) | k | v]. Heads as the
folder's class says: GPTNeoXModel, GPTNeoXForCausalLM (`embed_out`), ...ForSequenceClassification (`score`),
...ForTokenClassification (`classifier`), ...ForQuestionAnswering (`qa_outputs`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.residual import uses_final_norm
from zoo.pretrained.decoder_heads import BARE, QA, SCORE, CausalLMLayout, token_classifier
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

_WIRING = {True: "parallel", False: "pre"}  # use_parallel_residual -> norm_placement
_LAYER = {  # zoo sub-module -> HF sub-module inside `layers.{i}.` (qkv handled apart: its rows are reordered)
    "self_attn.o": "attention.dense",
    "ffn.up": "mlp.dense_h_to_4h",
    "ffn.down": "mlp.dense_4h_to_h",
    "norm_self": "input_layernorm",
    "norm_ffn": "post_attention_layernorm",
}


def heads_to_blocks(t: torch.Tensor, heads: int) -> torch.Tensor:
    """GPT-NeoX rows (H, 3, D) -> zoo rows (3, H, D): [q_0 k_0 v_0 q_1 ...] -> [q_0 q_1 ... | k ... | v ...]."""
    return t.reshape(heads, 3, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


def blocks_to_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """The inverse of `heads_to_blocks`: zoo rows (3, H, D) -> GPT-NeoX rows (H, 3, D)."""
    return t.reshape(3, heads, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


def _rope(hf: dict[str, Any]) -> dict[str, Any]:
    """rope_base / rope_fraction from transformers 5's `rope_parameters`, or 4.x's `rotary_emb_base` /
    `rotary_pct` (+ `rope_scaling`); only unscaled RoPE is reproduced."""
    params = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    rope_type = params.pop("rope_type", params.pop("type", "default"))
    base = params.pop("rope_theta", hf.get("rotary_emb_base", 10000.0))
    fraction = params.pop("partial_rotary_factor", hf.get("rotary_pct", 0.25))
    require(hf, "gpt_neox", {"rope_type": (rope_type, "default"),
                             **{f"rope_parameters.{k}": (v, "absent") for k, v in params.items()}})
    return {"rope_base": float(base), "rope_fraction": float(fraction)}


@FAMILIES.register("gpt_neox")
class GPTNeoX(HeadedFamily):
    model_type = "gpt_neox"
    architecture = "GPTNeoXForCausalLM"
    class_prefix = "GPTNeoX"
    lm_suffixes = ("ForCausalLM",)
    prefixes = ("gpt_neox.",)
    heads = {"none": BARE, "lm": CausalLMLayout("lm", proj="~embed_out", alias="~lm_head"),  # lm_head: transformers 5
             "classifier": SCORE, "token_classifier": token_classifier("~classifier"), "qa": QA}

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        # attention_bias=False drops the attention biases but keeps the MLP and LayerNorm ones: no zoo knob
        require(hf, "gpt_neox", {"attention_bias": (hf.get("attention_bias", True), True)})
        vocab = hf["vocab_size"]
        eos = special_id(hf, "eos_token_id", vocab, 0)
        return ModelConfig(
            arch="decoder", vocab_size=vocab, d_model=hf["hidden_size"], n_layers=hf["num_hidden_layers"],
            n_heads=hf["num_attention_heads"], d_ff=hf["intermediate_size"],
            activation=hf_activation(hf.get("hidden_act", "gelu"), "gpt_neox"), norm="layernorm",
            norm_eps=hf.get("layer_norm_eps", 1e-5), norm_placement=_WIRING[bool(hf.get("use_parallel_residual", True))],
            positional="rope", rope_layout="half", **_rope(hf), max_seq_len=hf.get("max_position_embeddings", 2048),
            dropout=hf.get("hidden_dropout", 0.0), attn_dropout=hf.get("attention_dropout", 0.0), bias=True,
            tie_embeddings=hf.get("tie_word_embeddings", False),
            pad_id=special_id(hf, "pad_token_id", vocab, eos), bos_id=special_id(hf, "bos_token_id", vocab, eos),
            eos_id=eos, **self.head_config(hf),
        )

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        unsupported(cfg, "gpt_neox", {
            "arch": (cfg.arch, "decoder"), "norm": (cfg.norm, "layernorm"),
            "norm_placement in (parallel, pre)": (cfg.norm_placement in _WIRING.values(), True),
            "positional": (cfg.positional, "rope"), "rope_layout": (cfg.rope_layout, "half"),
            "rope_scaling": (cfg.rope_scaling, "none"), "bias": (cfg.bias, True), "qkv_bias": (cfg.use_qkv_bias, True),
            "activation is plain": (cfg.activation in ZOO_TO_HF_ACTIVATION, True), "n_kv_heads": (cfg.kv_heads, cfg.n_heads),
            "head_dim": (cfg.head_size, cfg.d_model // cfg.n_heads), "use_final_norm": (uses_final_norm(cfg), True),
            "embed_norm": (cfg.embed_norm, False), "embed_scale": (cfg.embed_scale, False),
            "type_vocab_size": (cfg.type_vocab_size, 0), "head_transform": (cfg.head_transform, False),
            "head_bias": (cfg.head_bias, False), "residual": (cfg.residual, True), "ffn": (cfg.ffn, "mlp"),
        })
        return {
            "model_type": "gpt_neox", **self.head_to_hf(cfg), "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
            "intermediate_size": cfg.ffn_dim, "hidden_act": ZOO_TO_HF_ACTIVATION[cfg.activation],
            "layer_norm_eps": cfg.norm_eps, "use_parallel_residual": cfg.norm_placement == "parallel",
            "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_base,
                                "partial_rotary_factor": cfg.rope_fraction},
            "rotary_emb_base": cfg.rope_base, "rotary_pct": cfg.rope_fraction,  # what transformers 4.x reads
            "max_position_embeddings": cfg.max_seq_len, "attention_bias": True, "hidden_dropout": cfg.dropout,
            "attention_dropout": cfg.attention_dropout, "tie_word_embeddings": cfg.tie_embeddings,
            "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id, "pad_token_id": cfg.pad_id,
        }

    def base_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        d, f, v, heads = cfg.d_model, cfg.ffn_dim, cfg.vocab_size, cfg.n_heads
        shapes = {"self_attn.o": (d, d), "ffn.up": (f, d), "ffn.down": (d, f), "norm_self": (d,), "norm_ffn": (d,)}
        out = {"embed.tokens.weight": src.take("embed_in.weight", (v, d))}
        for i in range(cfg.n_layers):
            z, h = f"decoder_stack.layers.{i}", f"layers.{i}"
            qkv = f"{h}.attention.query_key_value"
            out[f"{z}.self_attn.qkv.weight"] = heads_to_blocks(src.take(f"{qkv}.weight", (3 * d, d)), heads)
            out[f"{z}.self_attn.qkv.bias"] = heads_to_blocks(src.take(f"{qkv}.bias", (3 * d,)), heads)
            for zoo_name, hf_name in _LAYER.items():
                shape = shapes[zoo_name]
                out[f"{z}.{zoo_name}.weight"] = src.take(f"{h}.{hf_name}.weight", shape)
                out[f"{z}.{zoo_name}.bias"] = src.take(f"{h}.{hf_name}.bias", shape[:1])
        out["decoder_stack.final_norm.weight"] = src.take("final_layer_norm.weight", (d,))
        out["decoder_stack.final_norm.bias"] = src.take("final_layer_norm.bias", (d,))
        return out

    def base_to_hf(self, state: Mapping[str, torch.Tensor], cfg: ModelConfig, prefix: str) -> dict[str, torch.Tensor]:
        out = {f"{prefix}embed_in.weight": state["embed.tokens.weight"],
               f"{prefix}final_layer_norm.weight": state["decoder_stack.final_norm.weight"],
               f"{prefix}final_layer_norm.bias": state["decoder_stack.final_norm.bias"]}
        for i in range(cfg.n_layers):
            z, h = f"decoder_stack.layers.{i}", f"{prefix}layers.{i}"
            for part in ("weight", "bias"):
                out[f"{h}.attention.query_key_value.{part}"] = blocks_to_heads(state[f"{z}.self_attn.qkv.{part}"], cfg.n_heads)
                for zoo_name, hf_name in _LAYER.items():
                    out[f"{h}.{hf_name}.{part}"] = state[f"{z}.{zoo_name}.{part}"]
        return out
