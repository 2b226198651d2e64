"""Qwen2 (and Qwen2.5): Llama with biases on q, k and v only (zoo: `qkv_bias: true`, `bias: false`).
Its sliding window (`use_sliding_window`, on the layers from `max_window_layers` on, or as `layer_types`
lists them) is read only where zoo's `sliding_window` reproduces it exactly: on every layer or on none."""

from __future__ import annotations

from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.family import FAMILIES
from zoo.pretrained.llama import Checks, Llama

_KINDS = ("full_attention", "sliding_attention")


@FAMILIES.register("qwen2")
class Qwen2(Llama):
    model_type = "qwen2"
    architecture = "Qwen2ForCausalLM"
    class_prefix = "Qwen2"
    hf_defaults = {"max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "sliding_window": 4096,
                   "max_window_layers": 28}

    def from_hf(self, hf: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        settings, checks = super().from_hf(hf)
        window = hf["sliding_window"] if hf.get("use_sliding_window", False) else None  # as Qwen2Config reads it
        kinds = set(hf.get("layer_types") or [_KINDS[window is not None and i >= hf["max_window_layers"]]
                                              for i in range(hf["num_hidden_layers"])])
        if window is not None:
            uniform = len(kinds) == 1 and kinds <= set(_KINDS)
            checks["layer_types all full_attention or all sliding_attention"] = (uniform, True)
        local = window is not None and kinds == {"sliding_attention"}
        return {**settings, "sliding_window": window if local else None}, checks

    def to_hf(self, cfg: ModelConfig) -> tuple[dict[str, Any], Checks]:
        hf, checks = super().to_hf(cfg)
        window = cfg.sliding_window
        every = cfg.global_every if window is not None else 0
        hf = {**hf, "use_sliding_window": window is not None, "sliding_window": window,
              "max_window_layers": 0 if window is not None else cfg.n_layers,
              "layer_types": [_KINDS[cfg.layer_is_local(i)] for i in range(cfg.n_layers)]}
        return hf, {**checks, "global_every": (every, 0)}

    def bias_from_hf(self, hf: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        return {"bias": False, "qkv_bias": True}, {}  # fixed by the architecture, not by config.json

    def bias_to_hf(self, cfg: ModelConfig) -> tuple[dict[str, Any], Checks]:
        return {}, {"bias": (cfg.bias, False), "qkv_bias": (cfg.use_qkv_bias, True)}
