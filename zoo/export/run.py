"""`export(ckpt, dir, format=...)`: read a training checkpoint (or a zoo export) and publish it as a folder in
one of the registered formats, built beside the target and swapped in whole (zoo.atomic)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from zoo.atomic import publish_folder, remove_tree, staging_folder, sweep
from zoo.checkpoint import CheckpointError
from zoo.export.registry import FORMATS, check_target
from zoo.loader import load
from zoo.outputs import write_failure


def export(
    ckpt_path: str | os.PathLike, out_dir: str | os.PathLike, format: str = "zoo", **options: Any
) -> Path:
    """Write the export of `ckpt_path` into `out_dir` in `format`: `zoo` (model.safetensors, config.json,
    tokenizer/; what zoo.load reads) or `hf` (a Hugging Face folder; `model_type=` picks the family). A folder
    with files zoo did not write is refused, not emptied. Returns `out_dir`."""
    kind = FORMATS.get(format)
    unknown = sorted(set(options) - set(kind.options))
    if unknown:
        raise ValueError(f"export format {format!r} has no option {unknown[0]!r} "
                         f"(its options: {', '.join(kind.options) or 'none'}).")
    if kind.check is not None:
        kind.check(**options)
    target = Path(out_dir).resolve()  # swap the real folder, never a link to it
    sweep(target.parent, re.escape(target.name), shared=False, contents=kind.files)  # a killed export's rest
    check_target(target, Path(ckpt_path), kind)
    model, tokenizer = load(ckpt_path)
    try:
        staging = staging_folder(target)
    except OSError as e:  # e.g. a read-only folder: named as the user gave it, not by its staging name
        raise CheckpointError(str(write_failure(f"dir={out_dir}", e))) from None
    try:
        kind.write(staging, model, tokenizer, **options)
        publish_folder(staging, target)
    except BaseException:
        remove_tree(staging)  # nothing there once publishing has renamed it in
        raise
    return Path(out_dir)
