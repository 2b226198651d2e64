"""`load(path) -> (model, tokenizer)`: a model back from a training checkpoint (`.ckpt`) or an export folder
(`model.safetensors`, `config.json`, `tokenizer/`), each checked against its saved config before loading."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch

from zoo.atomic import sweep
from zoo.checkpoint import (
    EXPORT_CONFIG,
    EXPORT_FILES,
    EXPORT_TOKENIZER,
    EXPORT_WEIGHTS,
    FORMAT_VERSION,
    Checkpoint,
    CheckpointError,
    is_sharded,
    model_state,
    restore_adapters,
    saved_model_config,
    state_problems,
)
from zoo.config import ModelConfig
from zoo.tokenizers.texts import tokenizer_from_texts


def load(path: str | os.PathLike):
    """Restore `(model, tokenizer)` from a training checkpoint (`.ckpt`) or an export folder. The model is in
    eval mode on CPU. Example: `model, tok = zoo.load("outputs/.../checkpoints/best.ckpt")`."""
    path = Path(path)
    if not os.path.lexists(path):  # an export swap killed half way (non-Linux) left the old folder aside
        sweep(path.parent, re.escape(path.name), shared=False, contents=EXPORT_FILES)
    if path.is_dir() and not is_sharded(path):  # a sharded checkpoint is a folder too
        return from_export(path)
    return from_checkpoint(Checkpoint.read(path))  # names and shapes checked against the saved config


def from_checkpoint(ckpt: Checkpoint):
    """`(model, tokenizer)` of a training checkpoint already read (`Checkpoint.read`): eval mode, on CPU, LoRA
    adapters merged; CheckpointError when it holds no tokenizer."""
    from zoo.modules.lora import merge_lora
    from zoo.presets import build

    record = ckpt.record
    tokenizer = checkpoint_tokenizer(ckpt)
    model = build(saved_model_config(record.model_config, f"{ckpt.path}: zoo.model_config"))
    restore_adapters(model, record, ckpt.path)
    model.load_state_dict(model_state(ckpt.data["state_dict"]))
    model.pretrained_family = record.hf_model_type  # from a HF folder: export writes that family back
    return merge_lora(model).eval(), tokenizer


def checkpoint_tokenizer(ckpt: Checkpoint):
    """The tokenizer a training checkpoint saved (its files, as text, in its record); CheckpointError when it
    holds none."""
    if not ckpt.record.tokenizer_files:
        raise CheckpointError(f"{ckpt.path} holds no tokenizer (zoo.tokenizer_files is missing or empty): "
                              "the one saved at training time turns text into ids. Re-save it with one.")
    return tokenizer_from_texts(ckpt.record.tokenizer_files)


def from_export(folder: Path, meta: Any = None):
    """`(model, tokenizer)` from an export folder; config.json (`meta` when already parsed) and
    model.safetensors are checked first."""
    from zoo.presets import build
    from zoo.tokenizers import load_tokenizer

    missing = [n for n in EXPORT_FILES if not (folder / n).exists()]
    if missing:
        raise CheckpointError(f"{folder} is not a zoo export: missing {missing}")
    model = build(_export_config(folder / EXPORT_CONFIG, meta))
    _load_export_weights(model, folder / EXPORT_WEIGHTS)
    return model.eval(), load_tokenizer(folder / EXPORT_TOKENIZER)


def _export_config(file: Path, meta: Any = None) -> ModelConfig:
    """The ModelConfig of an export's config.json (read unless `meta` is it, parsed), with an error naming
    the file for bad JSON or keys."""
    try:
        meta = json.loads(file.read_text(encoding="utf-8")) if meta is None else meta
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{file} is not valid JSON ({e}); an export's config.json holds format_version "
                              "and model_config") from None
    if not isinstance(meta, dict) or "model_config" not in meta:
        hf = isinstance(meta, dict) and "model_type" in meta
        hint = ("; it looks like a Hugging Face config: load that folder with zoo.from_pretrained"
                if hf else "")
        raise CheckpointError(f"{file} has no 'model_config', so {file.parent} is not a zoo export{hint}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{file}: zoo export format {meta.get('format_version')!r}, "
                              f"expected {FORMAT_VERSION}")
    return saved_model_config(meta["model_config"], f"{file}: model_config")


def _load_export_weights(model: torch.nn.Module, file: Path) -> None:
    """Check the names and shapes in `file`'s header against `model`, then load it (tied tensors stored
    once)."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_model

    try:
        with safe_open(str(file), framework="pt") as f:
            shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{file} is not a readable safetensors file (truncated or corrupt?): "
                              f"{e}") from None
    problems = state_problems(shapes, model, tied_stored_once=True)
    if problems:
        raise CheckpointError(f"{file} does not fit the model its config.json describes: {problems}")
    load_model(model, str(file))
