"""Export format `gguf`: `model.gguf`, one file llama.cpp (and ollama, LM Studio) runs and transformers reads
(`from_pretrained(dir, gguf_file="model.gguf")`), with the tokenizer inside. `dtype=` f32, f16 (default),
q8_0 or q4_0; `model_type=` picks the family (else the one the run was initialised from, else the first that
fits). The conversion is zoo.pretrained.gguf_file; everything it refuses is refused before the file is
written."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from zoo.export.registry import FORMATS, ExportFormat
from zoo.pretrained.gguf_arch import arch_for
from zoo.pretrained.gguf_file import GGUF_FILE, MARK, check_dtype, plan_gguf, write_gguf

DEFAULT_DTYPE = "f16"


def write(folder: Path, model: torch.nn.Module, tokenizer, *, dtype: str = DEFAULT_DTYPE,
          model_type: str | None = None) -> None:
    """`model.gguf` of the model and its tokenizer, planned (and checked) whole before it is written."""
    write_gguf(plan_gguf(model, tokenizer, dtype, model_type), folder / GGUF_FILE)


def check(*, dtype: str = DEFAULT_DTYPE, model_type: str | None = None) -> None:
    """The options alone, before the checkpoint is read."""
    check_dtype(dtype)
    if model_type is not None:
        arch_for(model_type)


@dataclass(frozen=True)
class GGUFFormat(ExportFormat):
    """A folder holding `model.gguf`; an earlier GGUF export is known by the mark zoo writes into the file."""

    def wrote(self, folder: Path) -> bool:
        import gguf

        try:
            return MARK in gguf.GGUFReader(str(folder / GGUF_FILE)).fields
        except Exception:  # missing, not GGUF, truncated: not ours
            return False


FORMATS.register("gguf", GGUFFormat("zoo GGUF export", (GGUF_FILE,), marks=(), write=write,
                                    options=("dtype", "model_type"), check=check))
