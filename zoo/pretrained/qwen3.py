"""Qwen3: Qwen2 with an RMSNorm on each head's q and k before RoPE (zoo: `qk_norm: true`, tensors
`self_attn.q_norm` / `self_attn.k_norm`), `head_dim` apart from hidden/heads (128 when config.json omits it)
and no q/k/v bias. `attention_bias: true` biases o as well but not the MLP, which zoo cannot express."""

from __future__ import annotations

from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.family import FAMILIES
from zoo.pretrained.llama import Checks
from zoo.pretrained.qwen2 import Qwen2


@FAMILIES.register("qwen3")
class Qwen3(Qwen2):
    model_type = "qwen3"
    architecture = "Qwen3ForCausalLM"
    class_prefix = "Qwen3"
    hf_defaults = {**Qwen2.hf_defaults, "head_dim": 128}

    def from_hf(self, hf: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        settings, checks = super().from_hf(hf)
        return {**settings, "qk_norm": True}, checks

    def to_hf(self, cfg: ModelConfig) -> tuple[dict[str, Any], Checks]:
        hf, checks = super().to_hf(cfg)
        return hf, {**checks, "qk_norm": (cfg.qk_norm, True)}

    def bias_from_hf(self, hf: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        return {"bias": False}, {"attention_bias": (hf.get("attention_bias", False), False)}

    def bias_to_hf(self, cfg: ModelConfig) -> tuple[dict[str, Any], Checks]:
        return {"attention_bias": False}, {"bias": (cfg.bias, False), "qkv_bias": (cfg.use_qkv_bias, False)}

    def layer_tensors(self, cfg: ModelConfig, h: str) -> dict[str, tuple[str, tuple[int, ...]]]:
        return {**super().layer_tensors(cfg, h),
                **{f"self_attn.{n}.weight": (f"{h}.self_attn.{n}.weight", (cfg.head_size,)) for n in ("q_norm", "k_norm")}}
