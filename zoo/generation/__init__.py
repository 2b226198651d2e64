"""Decoding for zoo models: greedy, sampling (temperature / top-k / top-p), batched beam search, with a
KV cache; `generate(model, input_ids, ...)` is the entry point (also `model.generate(...)`)."""

from importlib import import_module
from typing import Any

# public name -> its module, imported when the name is first read (PEP 562): the decoding options
# (zoo.generation.config.GENERATION_OPTIONS) are read without torch, e.g. while train.py composes its config
_HOMES = {"GenerateOutput": "zoo.generation.api", "generate": "zoo.generation.api",
          "GenerationConfig": "zoo.generation.config", "pad_prompts": "zoo.generation.prompts"}
__all__ = ["GenerateOutput", "GenerationConfig", "generate", "pad_prompts"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        value = globals()[name] = getattr(import_module(_HOMES[name]), name)
        return value
    raise AttributeError(f"module 'zoo.generation' has no attribute {name!r}")
