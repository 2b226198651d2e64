"""Export format `zoo`: `model.safetensors` (tied weights stored once), `config.json` (format version and
model config) and `tokenizer/`, the folder `zoo.load` reads back."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from zoo.atomic import default_mode
from zoo.checkpoint import EXPORT_CONFIG, EXPORT_FILES, EXPORT_TOKENIZER, EXPORT_WEIGHTS, FORMAT_VERSION
from zoo.export.registry import FORMATS, ExportFormat


def write(folder: Path, model: torch.nn.Module, tokenizer) -> None:
    """The three parts of an export, written into an empty `folder`."""
    from safetensors.torch import save_model

    save_model(model, str(folder / EXPORT_WEIGHTS))
    default_mode(folder / EXPORT_WEIGHTS)  # safetensors writes 0600; checkpoints are 0666 less the umask
    meta = {"format_version": FORMAT_VERSION, "model_config": model.config.to_dict()}
    (folder / EXPORT_CONFIG).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    tokenizer.save(folder / EXPORT_TOKENIZER)


FORMATS.register("zoo", ExportFormat("zoo export", EXPORT_FILES, ("format_version", "model_config"), write))
