"""`zoo.export(ckpt, dir, format="hf")`: a training checkpoint (or zoo export) as a Hugging Face folder that
`transformers.AutoModelFor...from_pretrained(dir)` and `AutoTokenizer.from_pretrained(dir)` load: config.json,
model.safetensors (LoRA adapters merged in) and the tokenizer files. The folder is written beside the target
and swapped in whole, so it holds the complete old export or the complete new one at every moment."""

from __future__ import annotations

import json
import os
from pathlib import Path

from zoo.atomic import recover_folder, remove_tree, staging_folder, swap_folder
from zoo.pretrained.io import CONFIG, SAFE_WEIGHTS, SAVE_ID

HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
HF_EXPORT_FILES = (CONFIG, SAFE_WEIGHTS, *HF_TOKENIZER_FILES)  # all an HF export folder may hold


def export_hf(ckpt_path: str | os.PathLike, out_dir: str | os.PathLike, *, model_type: str | None = None) -> Path:
    """Write the HF folder of `ckpt_path` into `out_dir`. The family is `model_type`, else the one the run was
    initialised from (init_from a HF folder), else the first whose knobs fit the model (ValueError naming
    every knob when none does). A classifier's `id2label` / `label2id` are the label names the checkpoint was
    trained on (kept with its tokenizer). A folder with files zoo did not write is refused, not emptied."""
    from zoo.checkpoint import CheckpointError
    from zoo.loader import load
    from zoo.pretrained.api import save_pretrained

    out = Path(out_dir)
    target = out.resolve()
    recover_folder(target, HF_EXPORT_FILES)
    _check_target(target, Path(ckpt_path), CheckpointError)
    model, tokenizer = load(ckpt_path)  # LoRA adapters merged
    staging = staging_folder(target)
    try:
        save_pretrained(model, staging, model_type=model_type, label_names=tokenizer.label_names)
        tokenizer.save_hf(staging)
        swap_folder(staging, target)
    except BaseException:
        remove_tree(staging)
        raise
    return out


def _is_hf_export(folder: Path) -> bool:
    """A folder zoo's save_pretrained wrote (its config.json carries a zoo_save_id)."""
    try:
        meta = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and SAVE_ID in meta


def _check_target(target: Path, ckpt_path: Path, error: type[Exception]) -> None:
    """Refuse a target that replacing as a whole would lose files from."""
    if not target.exists():
        return
    if not target.is_dir():
        raise error(f"export folder {target} is a file; give a new folder or an earlier export.")
    names = sorted(p.name for p in target.iterdir())
    if names and not _is_hf_export(target):
        raise error(f"export folder {target} exists and is not a zoo Hugging Face export; give an empty or new "
                    "folder.")
    if target in ckpt_path.resolve().parents:
        raise error(f"checkpoint {ckpt_path} is inside the export folder {target}, which re-exporting replaces "
                    "as a whole; export to another folder.")
    foreign = [n for n in names if n not in HF_EXPORT_FILES]
    if foreign:
        raise error(f"export folder {target} holds files zoo did not write: {', '.join(foreign)}; re-exporting "
                    f"replaces the folder as a whole (allowed: {', '.join(HF_EXPORT_FILES)}), so move them out "
                    "or export to another folder.")
