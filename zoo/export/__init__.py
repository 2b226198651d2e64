"""`zoo.export(ckpt, dir, format=...)`: a training checkpoint (or export) written as a folder of another
format, built beside the target and swapped in whole."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import torch

from zoo.atomic import default_mode, recover_folder, remove_tree, staging_folder, swap_folder
from zoo.checkpoint import (
    EXPORT_CONFIG,
    EXPORT_FILES,
    EXPORT_TOKENIZER,
    EXPORT_WEIGHTS,
    FORMAT_VERSION,
    CheckpointError,
)
from zoo.loader import is_export, load


def export(ckpt_path: str | os.PathLike, out_dir: str | os.PathLike, format: str = "zoo", **options: Any) -> Path:
    """Write `model.safetensors` (tied weights stored once), `config.json` and `tokenizer/` to `out_dir`.
    The export is built beside the folder and swapped in whole, so the folder holds the complete old export
    or the complete new one at every moment. A folder with files zoo did not write is refused, not emptied.
    `format="hf"` writes a Hugging Face folder instead (zoo.pretrained.export.export_hf; `model_type=`);
    LoRA adapters of a fine-tuning checkpoint are merged into the weights either way."""
    if format != "zoo":
        return _export_other(format, ckpt_path, out_dir, **options)
    out = Path(out_dir)
    target = out.resolve()  # swap the real folder, never a link to it
    recover_folder(target, EXPORT_FILES)
    _check_export_target(target, Path(ckpt_path))
    model, tokenizer = load(ckpt_path)
    staging = staging_folder(target)
    try:
        _write_export(staging, model, tokenizer)
        swap_folder(staging, target)
    except BaseException:
        remove_tree(staging)  # nothing there once the swap has renamed it in
        raise
    return out


def _export_other(format: str, ckpt_path: str | os.PathLike, out_dir: str | os.PathLike, **options: Any) -> Path:
    """The export formats besides zoo's own, by name."""
    from zoo.pretrained.export import export_hf

    formats = {"hf": export_hf}
    if format not in formats:
        from zoo.registry import unknown_choice_message

        raise ValueError(unknown_choice_message("export format", format, ["zoo", *formats]))
    return formats[format](ckpt_path, out_dir, **options)


def _check_export_target(target: Path, ckpt_path: Path) -> None:
    """Refuse an export folder that re-exporting would lose files from: a file, a folder that is not a zoo
    export, one holding the checkpoint being exported, or one holding files zoo did not write."""
    if not target.exists():
        return
    if not target.is_dir():
        raise CheckpointError(f"export folder {target} is a file; give a new folder or an earlier export.")
    names = sorted(p.name for p in target.iterdir())
    if names and not is_export(target):
        raise CheckpointError(f"export folder {target} exists and is not a zoo export; give an empty or new folder.")
    if target in ckpt_path.resolve().parents:
        raise CheckpointError(
            f"checkpoint {ckpt_path} is inside the export folder {target}, which re-exporting replaces as a "
            f"whole; move the checkpoint out of it or export to another folder."
        )
    foreign = [n for n in names if n not in EXPORT_FILES]
    if foreign:
        raise CheckpointError(
            f"export folder {target} holds files zoo did not write: {', '.join(foreign)}; re-exporting "
            f"replaces the folder as a whole (allowed: {', '.join(EXPORT_FILES)}), so move them out or export "
            f"to another folder."
        )


def _write_export(folder: Path, model: torch.nn.Module, tokenizer) -> None:
    """The three parts of an export, written into an empty `folder`."""
    from safetensors.torch import save_model

    save_model(model, str(folder / EXPORT_WEIGHTS))
    default_mode(folder / EXPORT_WEIGHTS)  # safetensors writes 0600; checkpoints are 0666 less the umask
    meta = {"format_version": FORMAT_VERSION, "model_config": model.config.to_dict()}
    (folder / EXPORT_CONFIG).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    tokenizer.save(folder / EXPORT_TOKENIZER)


class _CallableModule(types.ModuleType):
    """`zoo.export` names both this package and its function: importing the package rebinds `zoo.export` to
    the package, so the package calls the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> Path:
        return export(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
