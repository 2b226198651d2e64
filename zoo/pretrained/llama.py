"""Llama: decoder, RMSNorm pre-norm, RoPE (rotate-half), SwiGLU, grouped-query attention, no biases.
HF keeps q/k/v and gate/up as separate matrices; zoo fuses them as [q | k | v] and [gate | value]."""

from __future__ import annotations

from typing import Any

import torch

from zoo.config import ModelConfig
from zoo.modules.residual import uses_final_norm
from zoo.modules.rope_scaling import ROPE_SCALINGS
from zoo.pretrained.family import FAMILIES, Family, HFTensors, require, special_id, unsupported

_GATED = {"silu": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu_tanh"}  # HF hidden_act -> zoo gated activation
_ROPE_TYPES = {"default": "none", "linear": "linear", "llama3": "llama3", "yarn": "yarn"}  # HF rope_type -> rope_scaling
_ROPE_KEYS = {"factor": "rope_factor", "low_freq_factor": "rope_low_freq_factor",  # HF rope_parameters -> zoo key
              "high_freq_factor": "rope_high_freq_factor", "original_max_position_embeddings": "rope_original_max_len"}
_ROPE_DEFAULTS = {"beta_fast": 32, "beta_slow": 1, "truncate": True, "mscale": None, "mscale_all_dim": None,
                  "attention_factor": None, "partial_rotary_factor": 1.0}  # other HF keys zoo reproduces only at these


def _rope(hf: dict[str, Any]) -> dict[str, Any]:
    """zoo's RoPE keys (rope_base, rope_scaling and the keys that scaling reads) from transformers 5's
    `rope_parameters` or 4.x's `rope_theta` / `rope_scaling`; raises naming any setting zoo cannot reproduce."""
    params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    require(hf, "llama", {f"rope_type in ({', '.join(_ROPE_TYPES)})": (rope_type in _ROPE_TYPES, True)})
    scaling = _ROPE_TYPES[rope_type]
    reads = ROPE_SCALINGS.get(scaling).keys
    out = {"rope_base": float(params.get("rope_theta", hf.get("rope_theta", 10000.0))), "rope_scaling": scaling}
    checks = {}
    for hf_key, key in _ROPE_KEYS.items():
        if key in reads:
            value = params.get(hf_key)
            checks[f"rope_parameters.{hf_key} given"] = (value is not None, True)
            out[key] = value if value is None or key == "rope_original_max_len" else float(value)
    for hf_key, value in params.items():
        if hf_key not in ("rope_type", "type", "rope_theta") and _ROPE_KEYS.get(hf_key) not in reads:
            checks[f"rope_parameters.{hf_key}"] = (value, _ROPE_DEFAULTS.get(hf_key, "absent"))
    require(hf, "llama", checks)
    return out


def _rope_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    """transformers 5's `rope_parameters` for zoo's RoPE keys."""
    rope_type = {v: k for k, v in _ROPE_TYPES.items()}[cfg.rope_scaling]
    reads = ROPE_SCALINGS.get(cfg.rope_scaling).keys
    return {"rope_type": rope_type, "rope_theta": cfg.rope_base,
            **{hf_key: getattr(cfg, key) for hf_key, key in _ROPE_KEYS.items() if key in reads}}


@FAMILIES.register("llama")
class Llama(Family):
    model_type = "llama"
    architecture = "LlamaForCausalLM"
    prefixes = ("model.",)

    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        d, heads = hf["hidden_size"], hf["num_attention_heads"]
        rope = _rope(hf)
        act = hf.get("hidden_act", "silu")
        require(hf, "llama", {
            "mlp_bias == attention_bias": (hf.get("mlp_bias", False) == hf.get("attention_bias", False), True),
            f"hidden_act in ({', '.join(_GATED)})": (act in _GATED, True),
        })
        head_dim = hf.get("head_dim")
        vocab = hf["vocab_size"]
        eos = special_id(hf, "eos_token_id", vocab, 2)
        return ModelConfig(
            arch="decoder", vocab_size=vocab, d_model=d, n_layers=hf["num_hidden_layers"], n_heads=heads,
            n_kv_heads=hf.get("num_key_value_heads") or heads, d_ff=hf["intermediate_size"], activation=_GATED[act],
            norm="rmsnorm", norm_eps=hf.get("rms_norm_eps", 1e-6), norm_placement="pre", positional="rope",
            head_dim=None if head_dim in (None, d // heads) else head_dim, rope_layout="half", **rope,
            max_seq_len=hf.get("max_position_embeddings", 2048),
            dropout=0.0, attn_dropout=hf.get("attention_dropout", 0.0), bias=hf.get("attention_bias", False),
            tie_embeddings=hf.get("tie_word_embeddings", False),
            pad_id=special_id(hf, "pad_token_id", vocab, 0), bos_id=special_id(hf, "bos_token_id", vocab, 1), eos_id=eos,
        )

    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        unsupported(cfg, "llama", {
            "arch": (cfg.arch, "decoder"), "norm": (cfg.norm, "rmsnorm"), "norm_placement": (cfg.norm_placement, "pre"),
            "positional": (cfg.positional, "rope"), "rope_layout": (cfg.rope_layout, "half"),
            "rope_fraction": (cfg.rope_fraction, 1.0),
            f"rope_scaling in ({', '.join(_ROPE_TYPES.values())})": (cfg.rope_scaling in _ROPE_TYPES.values(), True),
            f"activation in ({', '.join(_GATED.values())})": (cfg.activation in _GATED.values(), True),
            "use_final_norm": (uses_final_norm(cfg), True),
            "embed_norm": (cfg.embed_norm, False), "embed_scale": (cfg.embed_scale, False),
            "type_vocab_size": (cfg.type_vocab_size, 0), "head_transform": (cfg.head_transform, False),
            "head_bias": (cfg.head_bias, False), "residual": (cfg.residual, True), "ffn": (cfg.ffn, "mlp"),
        })
        return {
            "model_type": "llama", "architectures": [self.architecture], "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
            "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_size, "intermediate_size": cfg.ffn_dim,
            "hidden_act": {v: k for k, v in _GATED.items()}[cfg.activation], "rms_norm_eps": cfg.norm_eps,
            "rope_parameters": _rope_to_hf(cfg), "rope_theta": cfg.rope_base,
            "max_position_embeddings": cfg.max_seq_len, "attention_bias": cfg.bias, "mlp_bias": cfg.bias,
            "attention_dropout": cfg.attention_dropout, "tie_word_embeddings": cfg.tie_embeddings,
            "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id, "pad_token_id": cfg.pad_id,
        }

    def _fuse(self, src: HFTensors, names: list[str], rows: list[int], d_in: int, bias: bool):
        weight = torch.cat([src.take(f"{n}.weight", (r, d_in)) for n, r in zip(names, rows, strict=True)])
        return weight, (torch.cat([src.take(f"{n}.bias", (r,)) for n, r in zip(names, rows, strict=True)]) if bias else None)

    def state_from_hf(self, src: HFTensors, cfg: ModelConfig) -> dict[str, torch.Tensor]:
        d, f, v = cfg.d_model, cfg.ffn_dim, cfg.vocab_size
        q_dim, kv_dim = cfg.n_heads * cfg.head_size, cfg.kv_heads * cfg.head_size
        out = {"embed.tokens.weight": src.take("embed_tokens.weight", (v, d))}
        for i in range(cfg.n_layers):
            z, h = f"decoder_stack.layers.{i}", f"layers.{i}"
            parts = {
                "self_attn.qkv": self._fuse(src, [f"{h}.self_attn.{p}_proj" for p in "qkv"], [q_dim, kv_dim, kv_dim], d, cfg.bias),
                "self_attn.o": self._fuse(src, [f"{h}.self_attn.o_proj"], [d], q_dim, cfg.bias),
                "ffn.up": self._fuse(src, [f"{h}.mlp.gate_proj", f"{h}.mlp.up_proj"], [f, f], d, cfg.bias),
                "ffn.down": self._fuse(src, [f"{h}.mlp.down_proj"], [d], f, cfg.bias),
            }
            for name, (weight, bias) in parts.items():
                out[f"{z}.{name}.weight"] = weight
                if bias is not None:
                    out[f"{z}.{name}.bias"] = bias
            out[f"{z}.norm_self.weight"] = src.take(f"{h}.input_layernorm.weight", (d,))
            out[f"{z}.norm_ffn.weight"] = src.take(f"{h}.post_attention_layernorm.weight", (d,))
            src.discard(f"{h}.self_attn.rotary_emb.inv_freq")  # old checkpoints store the RoPE buffer
        out["decoder_stack.final_norm.weight"] = src.take("norm.weight", (d,))
        out["head.proj.weight"] = src.take_lm_head(cfg, out["embed.tokens.weight"])
        src.finish()
        return out

    def state_to_hf(self, state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
        q_dim, kv_dim = cfg.n_heads * cfg.head_size, cfg.kv_heads * cfg.head_size
        out = {"model.embed_tokens.weight": state["embed.tokens.weight"],
               "model.norm.weight": state["decoder_stack.final_norm.weight"]}
        for i in range(cfg.n_layers):
            z, h = f"decoder_stack.layers.{i}", f"model.layers.{i}"
            splits = {
                "self_attn.qkv": ([f"{h}.self_attn.{p}_proj" for p in "qkv"], [q_dim, kv_dim, kv_dim]),
                "self_attn.o": ([f"{h}.self_attn.o_proj"], [cfg.d_model]),
                "ffn.up": ([f"{h}.mlp.gate_proj", f"{h}.mlp.up_proj"], [cfg.ffn_dim, cfg.ffn_dim]),
                "ffn.down": ([f"{h}.mlp.down_proj"], [cfg.d_model]),
            }
            for zoo_name, (names, rows) in splits.items():
                for part in ("weight", "bias") if cfg.bias else ("weight",):
                    for name, chunk in zip(names, state[f"{z}.{zoo_name}.{part}"].split(rows), strict=True):
                        out[f"{name}.{part}"] = chunk
            out[f"{h}.input_layernorm.weight"] = state[f"{z}.norm_self.weight"]
            out[f"{h}.post_attention_layernorm.weight"] = state[f"{z}.norm_ffn.weight"]
        if not cfg.tie_embeddings:
            out["lm_head.weight"] = state["head.proj.weight"]
        return out
