"""Decoding for zoo models: greedy, sampling (temperature / top-k / top-p), batched beam search, with a
KV cache; `generate(model, input_ids, ...)` is the entry point (also `model.generate(...)`)."""

from zoo.generation.api import GenerateOutput, generate
from zoo.generation.config import GenerationConfig
from zoo.generation.prompts import pad_prompts

__all__ = ["GenerateOutput", "GenerationConfig", "generate", "pad_prompts"]
