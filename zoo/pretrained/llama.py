"""Llama: decoder, RMSNorm pre-norm, RoPE (rotate-half), SwiGLU, grouped-query attention, no biases.
HF keeps q/k/v and gate/up as separate matrices; zoo fuses them as [q | k | v] and [gate | value].

The Llama-shaped families (Mistral, Qwen2, Qwen3, Phi3) subclass `Llama` and change only its hooks: the
biases a config implies (`bias_from_hf` / `bias_to_hf`), their own keys (`from_hf` / `to_hf`), the RoPE
types they know (`rope_types`, `partial_rotary`) and the per-layer tensor names (`linears`, `layer_tensors`)."""

from __future__ import annotations

import copy
from typing import Any

from zoo.config import ModelConfig
from zoo.modules.residual import uses_final_norm
from zoo.modules.rope_scaling import ROPE_SCALINGS
from zoo.pretrained.decoder_tensors import DecoderTensors
from zoo.pretrained.family import FAMILIES, require, special_id, unsupported

Checks = dict[str, tuple[Any, Any]]  # {setting: (value, supported)}, as `require` / `unsupported` take them

_GATED = {"silu": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu_tanh"}  # HF hidden_act -> zoo gated activation
_ROPE_TYPES = {"default": "none", "linear": "linear", "llama3": "llama3", "yarn": "yarn"}  # HF rope_type -> rope_scaling
_ROPE_KEYS = {"factor": "rope_factor", "low_freq_factor": "rope_low_freq_factor",  # HF rope_parameters -> zoo key
              "high_freq_factor": "rope_high_freq_factor", "original_max_position_embeddings": "rope_original_max_len"}
_ROPE_DEFAULTS = {"beta_fast": 32, "beta_slow": 1, "truncate": True, "mscale": None, "mscale_all_dim": None,
                  "attention_factor": None, "partial_rotary_factor": 1.0}  # other HF keys zoo reproduces only at these


@FAMILIES.register("llama")
class Llama(DecoderTensors):
    model_type = "llama"
    architecture = "LlamaForCausalLM"
    class_prefix = "Llama"
    hf_defaults: dict[str, Any] = {"max_position_embeddings": 2048, "rms_norm_eps": 1e-6}  # for keys config.json omits
    rope_types: dict[str, str] = _ROPE_TYPES  # the HF rope_type values the family's rotary embedding computes
    partial_rotary = False  # whether partial_rotary_factor rotates the first features only (-> rope_fraction)

    # ----- config.json -> ModelConfig -----
    def config_from_hf(self, hf: dict[str, Any]) -> ModelConfig:
        hf = copy.copy(hf)  # keeps its type: io.HFConfig names the file and key a checkpoint lacks
        for key, value in self.hf_defaults.items():
            hf.setdefault(key, value)
        settings, checks = self.from_hf(hf)
        require(hf, self.model_type, checks)
        return ModelConfig(**settings, **self.head_config(hf))

    def from_hf(self, hf: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        """ModelConfig keys of config.json `hf`, and the settings zoo must check it can reproduce."""
        d, heads, vocab = hf["hidden_size"], hf["num_attention_heads"], hf["vocab_size"]
        act, head_dim = hf.get("hidden_act", "silu"), hf.get("head_dim")
        biases, checks = self.bias_from_hf(hf)
        settings = dict(
            arch="decoder", vocab_size=vocab, d_model=d, n_layers=hf["num_hidden_layers"], n_heads=heads,
            n_kv_heads=hf.get("num_key_value_heads") or heads, d_ff=hf["intermediate_size"], activation=_GATED.get(act),
            norm="rmsnorm", norm_eps=hf["rms_norm_eps"], norm_placement="pre", positional="rope",
            head_dim=None if head_dim in (None, d // heads) else head_dim, rope_layout="half", **self.rope_from_hf(hf),
            max_seq_len=hf["max_position_embeddings"], dropout=0.0, attn_dropout=hf.get("attention_dropout", 0.0),
            **biases, tie_embeddings=hf.get("tie_word_embeddings", False),
            pad_id=special_id(hf, "pad_token_id", vocab, 0), bos_id=special_id(hf, "bos_token_id", vocab, 1),
            eos_id=special_id(hf, "eos_token_id", vocab, 2),
        )
        return settings, {f"hidden_act in ({', '.join(_GATED)})": (act in _GATED, True), **checks}

    def bias_from_hf(self, hf: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        """Llama: `attention_bias` on q, k, v and o; zoo's `bias` also covers the MLP, so `mlp_bias` must match."""
        attn = hf.get("attention_bias", False)
        return {"bias": attn}, {"mlp_bias == attention_bias": (hf.get("mlp_bias", False) == attn, True)}

    def rope_from_hf(self, hf: dict[str, Any]) -> dict[str, Any]:
        """zoo's RoPE keys (rope_base, rope_scaling and the keys that scaling reads, rope_fraction where the family
        rotates part of a head) from transformers 5's `rope_parameters` or 4.x's `rope_theta` / `rope_scaling`;
        raises naming any setting zoo cannot reproduce."""
        params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
        rope_type = params.get("rope_type", params.get("type", "default"))
        require(hf, self.model_type, {f"rope_type in ({', '.join(self.rope_types)})": (rope_type in self.rope_types, True)})
        scaling = self.rope_types[rope_type]
        reads = ROPE_SCALINGS.get(scaling).keys
        out = {"rope_base": float(params.get("rope_theta", hf.get("rope_theta", 10000.0))), "rope_scaling": scaling}
        own = {"rope_type", "type", "rope_theta"}
        if self.partial_rotary:  # 4.x configs keep it at the top level
            own.add("partial_rotary_factor")
            out["rope_fraction"] = float(params.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0)))
        checks = {}
        for hf_key, key in _ROPE_KEYS.items():
            if key in reads:
                value = params.get(hf_key)
                checks[f"rope_parameters.{hf_key} given"] = (value is not None, True)
                out[key] = value if value is None or key == "rope_original_max_len" else float(value)
        for hf_key, value in params.items():
            if hf_key not in own and _ROPE_KEYS.get(hf_key) not in reads:
                checks[f"rope_parameters.{hf_key}"] = (value, _ROPE_DEFAULTS.get(hf_key, "absent"))
        require(hf, self.model_type, checks)
        return out

    # ----- ModelConfig -> config.json -----
    def config_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        hf, checks = self.to_hf(cfg)
        unsupported(cfg, self.model_type, checks)
        return hf

    def to_hf(self, cfg: ModelConfig) -> tuple[dict[str, Any], Checks]:
        """config.json for `cfg`, and the knobs the family can express only at one value."""
        biases, bias_checks = self.bias_to_hf(cfg)
        rope, rope_checks = self.rope_to_hf(cfg)
        checks = {
            "arch": (cfg.arch, "decoder"), "norm": (cfg.norm, "rmsnorm"), "norm_placement": (cfg.norm_placement, "pre"),
            "positional": (cfg.positional, "rope"), "rope_layout": (cfg.rope_layout, "half"), **rope_checks,
            f"activation in ({', '.join(_GATED.values())})": (cfg.activation in _GATED.values(), True),
            "use_final_norm": (uses_final_norm(cfg), True),
            "embed_norm": (cfg.embed_norm, False), "embed_scale": (cfg.embed_scale, False),
            "type_vocab_size": (cfg.type_vocab_size, 0), "head_transform": (cfg.head_transform, False),
            "head_bias": (cfg.head_bias, False), "residual": (cfg.residual, True), "ffn": (cfg.ffn, "mlp"), **bias_checks,
        }
        hf = {
            "model_type": self.model_type, **self.head_to_hf(cfg), "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
            "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_size, "intermediate_size": cfg.ffn_dim,
            "hidden_act": {v: k for k, v in _GATED.items()}.get(cfg.activation), "rms_norm_eps": cfg.norm_eps, **rope,
            "max_position_embeddings": cfg.max_seq_len, **biases,
            "attention_dropout": cfg.attention_dropout, "tie_word_embeddings": cfg.tie_embeddings,
            "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id, "pad_token_id": cfg.pad_id,
        }
        return hf, checks

    def bias_to_hf(self, cfg: ModelConfig) -> tuple[dict[str, Any], Checks]:
        return {"attention_bias": cfg.bias, "mlp_bias": cfg.bias}, {"qkv_bias": (cfg.use_qkv_bias, cfg.bias)}

    def rope_to_hf(self, cfg: ModelConfig) -> tuple[dict[str, Any], Checks]:
        """transformers 5's `rope_parameters` (and 4.x's `rope_theta`) for zoo's RoPE keys."""
        rope_type = {v: k for k, v in self.rope_types.items()}.get(cfg.rope_scaling)
        reads = ROPE_SCALINGS.get(cfg.rope_scaling).keys
        params = {"rope_type": rope_type, "rope_theta": cfg.rope_base,
                  **{hf_key: getattr(cfg, key) for hf_key, key in _ROPE_KEYS.items() if key in reads}}
        checks = {f"rope_scaling in ({', '.join(self.rope_types.values())})": (rope_type is not None, True)}
        if self.partial_rotary:
            params["partial_rotary_factor"] = cfg.rope_fraction
        else:
            checks["rope_fraction"] = (cfg.rope_fraction, 1.0)
        return {"rope_parameters": params, "rope_theta": cfg.rope_base}, checks
