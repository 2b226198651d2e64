"""Export format `hf`: a Hugging Face folder that `transformers.AutoModelFor...from_pretrained(dir)` and
`AutoTokenizer.from_pretrained(dir)` load: config.json, model.safetensors and the tokenizer files. The
conversion is zoo.pretrained's `save_pretrained`; the family is `model_type=`, else the one the run was
initialised from, else the first whose knobs fit the model. A classifier's `id2label` / `label2id` are the
label names the checkpoint was trained on (kept with its tokenizer)."""

from __future__ import annotations

from pathlib import Path

import torch

from zoo.export.registry import FORMATS, ExportFormat
from zoo.pretrained.io import CONFIG, SAFE_WEIGHTS, SAVE_ID
from zoo.tokenizers.tokenizer import HF_CONFIG_FILE, HF_SPECIAL_MAP_FILE, TOKENIZER_FILE


def write(folder: Path, model: torch.nn.Module, tokenizer, *, model_type: str | None = None) -> None:
    """The model (ValueError naming every knob when no family fits) and the tokenizer, into `folder`."""
    from zoo.pretrained.api import save_pretrained

    save_pretrained(model, folder, model_type=model_type, label_names=tokenizer.label_names)
    tokenizer.save_hf(folder)


FILES = (CONFIG, SAFE_WEIGHTS, TOKENIZER_FILE, HF_CONFIG_FILE, HF_SPECIAL_MAP_FILE)  # what write writes
FORMATS.register("hf", ExportFormat("zoo Hugging Face export", FILES, marks=(SAVE_ID,), write=write,
                                    options=("model_type",)))
