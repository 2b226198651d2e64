"""Reading and writing Hugging Face checkpoint directories: `config.json` plus `model.safetensors` or
`pytorch_model.bin`. Pickles are opened with `torch.load(weights_only=True)` only, so a checkpoint can
never run code on load."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import torch

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def read_config(path: str | Path) -> dict[str, Any]:
    """The parsed `config.json` of checkpoint directory `path`; a clear error if it is not one."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"Checkpoint directory {str(folder)!r} does not exist (or is not a directory).")
    file = folder / "config.json"
    if not file.is_file():
        present = sorted(p.name for p in folder.iterdir())[:10]
        raise FileNotFoundError(
            f"{str(folder)!r} has no config.json, so it is not a Hugging Face checkpoint directory "
            f"(found: {', '.join(present) or 'nothing'})."
        )
    try:
        config = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{file} is not valid JSON: {err}.") from err
    if not isinstance(config, dict):
        raise ValueError(f"{file} must hold a JSON object, got {type(config).__name__}.")
    return config


def read_weights(path: str | Path) -> tuple[dict[str, torch.Tensor], Path]:
    """All tensors of the checkpoint in `path` (single file or sharded with an index) and the file read."""
    folder = Path(path)
    for index_name in INDEX_FILES:
        index = folder / index_name
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            tensors: dict[str, torch.Tensor] = {}
            for shard in shards:
                tensors.update(_read_file(folder / shard))
            return tensors, index
    for name in WEIGHT_FILES:
        file = folder / name
        if file.is_file():
            return _read_file(file), file
    raise FileNotFoundError(
        f"{str(folder)!r} has a config.json but no weights: expected one of {', '.join(WEIGHT_FILES + INDEX_FILES)}."
    )


def _read_file(file: Path) -> dict[str, torch.Tensor]:
    if not file.is_file():
        raise FileNotFoundError(f"Weight file {str(file)!r} (named in the shard index) does not exist.")
    if file.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(file))
    try:
        data = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:  # weights_only refuses globals outside torch's allow-list
        raise ValueError(
            f"{str(file)!r} is a pickle that needs arbitrary code to load (weights_only=True refused it: "
            f"{str(err).splitlines()[0]}). zoo never unpickles untrusted code; convert the checkpoint to "
            f"model.safetensors with trusted tools first."
        ) from err
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise ValueError(f"{str(file)!r} does not hold a flat state dict of tensors (got {type(data).__name__}).")
    return data


def write_checkpoint(path: str | Path, config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Path:
    """Write `config.json` and `model.safetensors` (contiguous copies; no shared storage) into `path`."""
    from safetensors.torch import save_file

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    plain = {name: t.detach().to("cpu").contiguous().clone() for name, t in tensors.items()}
    save_file(plain, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder
