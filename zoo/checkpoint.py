"""Checkpoints: atomic writes, validation on open, `load(path) -> (model, tokenizer)` and `export`.

A training checkpoint is a Lightning checkpoint plus a `zoo` section holding plain data only: the model
config (`ModelConfig.to_dict()`), the task, the tokenizer files (as text) and the RNG states. It opens
with `torch.load(weights_only=True)`. An export is a folder: `model.safetensors`, `config.json`,
`tokenizer/`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from zoo.atomic import atomic_file
from zoo.config import ModelConfig

FORMAT_VERSION = 1
EXPORT_WEIGHTS = "model.safetensors"
EXPORT_CONFIG = "config.json"
EXPORT_TOKENIZER = "tokenizer"
# Keys that may differ between a checkpoint and the run resuming it (they change no tensor shape).
RESUMABLE_KEYS = frozenset({"dropout", "attn_dropout"})


class CheckpointError(ValueError):
    """A checkpoint path that is missing, unreadable, not a zoo checkpoint, or incompatible."""


# ----------------------------------------------------------------------------------------- writing


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """torch.save through `atomic_file`: a reader (or a crash) never sees a half-written checkpoint."""
    with atomic_file(path) as f:
        torch.save(obj, f)


def tokenizer_files(tokenizer) -> dict[str, str]:
    """The files `ZooTokenizer.save` writes, as {file name: text} (plain data for the checkpoint)."""
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save(tmp)
        return {p.name: p.read_text(encoding="utf-8") for p in sorted(Path(tmp).iterdir()) if p.is_file()}


def tokenizer_from_files(files: Mapping[str, str]):
    """Rebuild a ZooTokenizer from `tokenizer_files` output."""
    from zoo.data import load_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            (Path(tmp) / Path(name).name).write_text(text, encoding="utf-8")
        return load_tokenizer(tmp)


def rng_states() -> dict[str, Any]:
    """Python, NumPy and torch (CPU + CUDA) RNG states as tensors / ints (weights_only-loadable)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: Mapping[str, Any]) -> None:
    """Inverse of `rng_states` (CUDA states only restored when the device count matches)."""
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    n = states["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(states["cuda"])


def zoo_section(config: ModelConfig, task: str, tokenizer) -> dict[str, Any]:
    """The `zoo` entry every training checkpoint carries."""
    return {
        "format_version": FORMAT_VERSION,
        "model_config": config.to_dict(),
        "task": task,
        "tokenizer_files": tokenizer_files(tokenizer),
        "rng": rng_states(),
    }


# ----------------------------------------------------------------------------------------- reading


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """torch.load(weights_only=True) with one clear error for a missing file, a file that is not a
    PyTorch checkpoint, or one without the zoo section."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.is_dir():
        raise CheckpointError(f"{path} is a directory, not a checkpoint file (exports load with zoo.load)")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # pickle, zip and torch errors alike mean "not a checkpoint"
        raise CheckpointError(f"{path} is not a readable checkpoint: {type(e).__name__}: {e}") from None
    if not isinstance(ckpt, dict) or "zoo" not in ckpt or "state_dict" not in ckpt:
        raise CheckpointError(f"{path} is a PyTorch file but not a zoo training checkpoint (no 'zoo' section)")
    if ckpt["zoo"].get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: zoo checkpoint format {ckpt['zoo'].get('format_version')!r}, expected {FORMAT_VERSION}"
        )
    return ckpt


def check_compatible(ckpt: Mapping[str, Any], config: ModelConfig, task: str, path: str | os.PathLike) -> None:
    """Raise CheckpointError naming every model key (and the task) where the checkpoint differs."""
    saved = ckpt["zoo"]["model_config"]
    current = config.to_dict()
    diffs = [
        f"model.{key}: checkpoint {saved.get(key)!r}, this run {value!r}"
        for key, value in current.items()
        if key not in RESUMABLE_KEYS and saved.get(key) != value
    ]
    if ckpt["zoo"].get("task") != task:
        diffs.append(f"task: checkpoint {ckpt['zoo'].get('task')!r}, this run {task!r}")
    if diffs:
        raise CheckpointError(f"checkpoint {path} does not match this run's model: " + "; ".join(diffs))


def _model_state(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k.removeprefix("model."): v for k, v in state_dict.items() if k.startswith("model.")}


def load(path: str | os.PathLike):
    """Restore `(model, tokenizer)` from a training checkpoint (`.ckpt`) or an export folder.
    The model is in eval mode on CPU. Example: `model, tok = zoo.load("outputs/.../checkpoints/best.ckpt")`."""
    from zoo.presets import build

    path = Path(path)
    if path.is_dir():
        return _load_export(path)
    ckpt = read_checkpoint(path)
    model = build(ModelConfig.from_dict(ckpt["zoo"]["model_config"]))
    model.load_state_dict(_model_state(ckpt["state_dict"]))
    return model.eval(), tokenizer_from_files(ckpt["zoo"]["tokenizer_files"])


def export(ckpt_path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Write `model.safetensors` (tied weights stored once), `config.json` and `tokenizer/` to `out_dir`."""
    from safetensors.torch import save_model

    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not _is_export(out):
        raise CheckpointError(f"export folder {out} exists and is not a zoo export; give an empty or new folder.")
    model, tokenizer = load(ckpt_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:  # build the whole export beside the target, then swap it in: no stale or half-written files
        save_model(model, str(staging / EXPORT_WEIGHTS))
        meta = {"format_version": FORMAT_VERSION, "model_config": model.config.to_dict()}
        (staging / EXPORT_CONFIG).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        tokenizer.save(staging / EXPORT_TOKENIZER)
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def _is_export(folder: Path) -> bool:
    """A folder an earlier `export` wrote (safe to replace as a whole)."""
    try:
        meta = json.loads((folder / EXPORT_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "format_version" in meta and "model_config" in meta


def _load_export(folder: Path):
    from safetensors.torch import load_model

    from zoo.data import load_tokenizer
    from zoo.presets import build

    missing = [n for n in (EXPORT_WEIGHTS, EXPORT_CONFIG, EXPORT_TOKENIZER) if not (folder / n).exists()]
    if missing:
        raise CheckpointError(f"{folder} is not a zoo export: missing {missing}")
    meta = json.loads((folder / EXPORT_CONFIG).read_text(encoding="utf-8"))
    model = build(ModelConfig.from_dict(meta["model_config"]))
    load_model(model, str(folder / EXPORT_WEIGHTS))
    return model.eval(), load_tokenizer(folder / EXPORT_TOKENIZER)
