"""Hugging Face `model_type` -> the module of its family. A module is imported on the first lookup of one of
its types, so `import zoo.pretrained` imports none; importing it registers its families (family.py)."""

from __future__ import annotations

import fnmatch
import importlib

from zoo.registry import Registry, unknown_choice_message

MODULES = {
    "bart": "bart", "bert": "bert", "deepseek_v2": "deepseek", "deepseek_v3": "deepseek",
    "distilbert": "bert", "gemma": "gemma", "gemma2": "gemma",
    "gemma3_text": "gemma", "glm4_moe_lite": "deepseek", "gpt2": "gpt2", "gpt_oss": "gpt_oss",
    "gpt_neox": "gpt_neox", "lfm2": "lfm2", "lfm2_moe": "lfm2", "llama": "llama", "marian": "bart",
    "minicpm3": "minicpm3", "mistral": "llama", "mixtral": "mixtral", "modernbert": "modernbert",
    "olmo2": "olmo2", "olmo_hybrid": "olmo_hybrid", "olmoe": "olmoe",
    "opt": "opt", "phi3": "llama", "qwen2": "llama", "qwen2_moe": "qwen_moe", "qwen3": "llama",
    "qwen3_moe": "qwen_moe", "qwen3_5": "qwen_hybrid", "qwen3_5_moe": "qwen_hybrid",
    "qwen3_5_moe_text": "qwen_hybrid", "qwen3_5_text": "qwen_hybrid",
    "qwen3_next": "qwen_hybrid", "roberta": "bert", "smollm3": "smollm3", "t5": "t5", "xlm-roberta": "bert",
    "youtu": "deepseek",
}


class Families(Registry):
    """FAMILIES: every type of `MODULES` is known before its module is imported."""

    def get(self, name: str):
        if name not in MODULES:
            raise ValueError(unknown_choice_message(self.kind, name, list(MODULES)))
        if name not in self._items:
            importlib.import_module(f"zoo.pretrained.{MODULES[name]}")
        return self._items[name]

    def names(self, pattern: str = "*") -> list[str]:
        return sorted(n for n in MODULES if fnmatch.fnmatch(n, pattern))

    def __contains__(self, name: object) -> bool:
        return name in MODULES

    def __len__(self) -> int:
        return len(MODULES)

    def __iter__(self):
        return iter(self.names())


FAMILIES = Families("Hugging Face model_type")


def export_order() -> list[str]:
    """The model_types a model without one is tried as, in order: the Llama-shaped ones (llama, mistral,
    qwen2, qwen3, phi3: what most tools read) first, then the rest alphabetically, so a Llama with QK-norm
    exports as qwen3, not as a rarer family that can also hold it (lfm2)."""
    return sorted(FAMILIES.names(), key=lambda name: MODULES[name] != "llama")
