"""What a sentence-transformers folder says about its embeddings, read as that package reads it: the modules
in `modules.json` (Transformer, then Pooling, then an optional Normalize), the pooling mode in
`1_Pooling/config.json` (v3+ `pooling_mode`, or the older `pooling_mode_*_tokens` flags), the length in
`sentence_bert_config.json` (`max_seq_length`; without it the tokenizer's `model_max_length` capped at the
model's `max_position_embeddings`), `do_lower_case`, and the default prompt of
`config_sentence_transformers.json`. Anything else in the pipeline is refused by name."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODULES_FILE = "modules.json"
# sentence-transformers' Pooling modes -> zoo's pooling names (zoo.embedding.pooling.POOLINGS)
MODES = {"mean": "mean", "cls": "cls", "lasttoken": "last", "max": "max"}
# the flags of the older 1_Pooling/config.json, in the order sentence-transformers concatenates them
LEGACY_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                "pooling_mode_mean_tokens": "mean",
                "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
KNOWN_MODULES = ("Transformer", "Pooling", "Normalize")  # class names, whatever module path the type names


@dataclass(frozen=True)
class EmbedSettings:
    """How texts become embeddings: `pooling` (a POOLINGS name), L2 `normalize`, `max_length` tokens per
    text including the specials (None: the model's max_seq_len), `lowercase` before tokenizing, and a
    `prompt` put before every text. `model_dir`: the folder holding the model's weights and tokenizer."""

    pooling: str = "mean"
    normalize: bool = False
    max_length: int | None = None
    lowercase: bool = False
    prompt: str = ""
    model_dir: Path | None = None


def read_settings(folder: Path) -> EmbedSettings:
    """The settings sentence-transformers' `SentenceTransformer(folder).encode` applies."""
    modules = _read_json(folder / MODULES_FILE)
    if not isinstance(modules, list) or not all(isinstance(m, dict) and "type" in m for m in modules):
        raise ValueError(f"{folder / MODULES_FILE} must be a list of modules, each with a 'type'.")
    kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        unknown = [str(m["type"]) for m, k in zip(modules, kinds, strict=True) if k not in KNOWN_MODULES]
        what = f"modules zoo does not run: {', '.join(unknown)}" if unknown else f"the modules {kinds}"
        raise ValueError(f"{folder / MODULES_FILE} lists {what}; zoo.embed runs Transformer, Pooling and an "
                         "optional Normalize, in that order.")
    model_dir = folder / str(modules[0].get("path", ""))
    pooling_dir = folder / str(modules[1].get("path", ""))
    prompt = _default_prompt(folder)
    pooling = _pooling_mode(_read_json(pooling_dir / "config.json"), pooling_dir / "config.json", prompt)
    if len(kinds) == 3:
        _check_normalize(folder / str(modules[2].get("path", "")))
    word = _read_optional(model_dir / "sentence_bert_config.json")
    return EmbedSettings(pooling=pooling, normalize=len(kinds) == 3, max_length=_max_length(model_dir, word),
                         lowercase=bool(word.get("do_lower_case", False)), prompt=prompt,
                         model_dir=model_dir)


def _pooling_mode(config: Any, file: Path, prompt: str) -> str:
    if not isinstance(config, dict):
        raise ValueError(f"{file} must hold a JSON object.")
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        modes = [mode] if isinstance(mode, str) else list(mode)
    else:  # the flags; none set means mean, as sentence-transformers reads them
        modes = [m for flag, m in LEGACY_FLAGS.items() if config.get(flag)] or ["mean"]
    if len(modes) != 1 or modes[0] not in MODES:
        raise ValueError(f"{file} asks for pooling {modes}; zoo.embed pools with one of "
                         f"{', '.join(MODES)} (sentence-transformers' names).")
    if config.get("include_prompt", True) is False and prompt:
        raise ValueError(f"{file} leaves the prompt out of the pooling (include_prompt: false); zoo.embed "
                         "pools every token of the text it is given.")
    return MODES[modes[0]]


def _check_normalize(folder: Path) -> None:
    config = _read_optional(folder / "config.json")
    target = config.get("module_input_name", "sentence_embedding")
    if target != "sentence_embedding":
        raise ValueError(f"{folder / 'config.json'} normalizes {target!r}; zoo.embed normalizes only the "
                         "pooled sentence embedding.")


def _max_length(model_dir: Path, word: dict[str, Any]) -> int | None:
    """sentence_bert_config's max_seq_length; else the tokenizer's model_max_length capped at the model's
    max_position_embeddings (as sentence-transformers' Transformer does); None when neither says."""
    if word.get("max_seq_length") is not None:
        return int(word["max_seq_length"])
    limits = [_read_optional(model_dir / "tokenizer_config.json").get("model_max_length"),
              _read_optional(model_dir / "config.json").get("max_position_embeddings")]
    limits = [int(v) for v in limits if isinstance(v, (int, float)) and 0 < v < 1e12]
    return min(limits) if limits else None


def _default_prompt(folder: Path) -> str:
    config = _read_optional(folder / "config_sentence_transformers.json")
    name = config.get("default_prompt_name")
    if name is None:
        return ""
    prompts = config.get("prompts") or {}
    if name not in prompts:
        raise ValueError(f"{folder / 'config_sentence_transformers.json'}: default_prompt_name={name!r} is "
                         f"not one of its prompts ({', '.join(map(repr, prompts)) or 'none'}).")
    return str(prompts[name])


def _read_optional(file: Path) -> dict[str, Any]:
    data = _read_json(file) if file.is_file() else {}
    return data if isinstance(data, dict) else {}


def _read_json(file: Path) -> Any:
    if not file.is_file():
        raise FileNotFoundError(f"{file} is missing; a sentence-transformers "
                                f"folder has it beside {MODULES_FILE}.")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{file} is not valid JSON: {e}") from None
