"""Mistral: Llama without biases, every layer attending within `sliding_window` (zoo: `sliding_window`,
`global_every: 0`; config.json's null means full attention). transformers ignores a Mistral config's
`layer_types` (Ministral is another model_type), and so does zoo."""

from __future__ import annotations

from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.decoder_heads import LLAMA_HEADS, QA
from zoo.pretrained.family import FAMILIES
from zoo.pretrained.llama import Checks, Llama


@FAMILIES.register("mistral")
class Mistral(Llama):
    model_type = "mistral"
    architecture = "MistralForCausalLM"
    class_prefix = "Mistral"
    heads = {**LLAMA_HEADS, "qa": QA}  # MistralForQuestionAnswering keeps its base under `model.`
    hf_defaults = {"max_position_embeddings": 4096 * 32, "rms_norm_eps": 1e-6, "sliding_window": 4096}

    def from_hf(self, hf: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        settings, checks = super().from_hf(hf)
        return {**settings, "sliding_window": hf["sliding_window"]}, checks

    def to_hf(self, cfg: ModelConfig) -> tuple[dict[str, Any], Checks]:
        hf, checks = super().to_hf(cfg)
        every = cfg.global_every if cfg.sliding_window is not None else 0
        return {**hf, "sliding_window": cfg.sliding_window}, {**checks, "global_every": (every, 0)}

    def bias_from_hf(self, hf: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        return {"bias": False}, {}  # no bias anywhere, whatever the config says

    def bias_to_hf(self, cfg: ModelConfig) -> tuple[dict[str, Any], Checks]:
        return {}, {"bias": (cfg.bias, False), "qkv_bias": (cfg.use_qkv_bias, False)}
