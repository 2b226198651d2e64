"""Reading and writing Hugging Face checkpoint directories: `config.json` plus `model.safetensors` or
`pytorch_model.bin`. Pickles are opened with `torch.load(weights_only=True)` only, so a checkpoint can
never run code on load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


class MissingConfigKey(KeyError, ValueError):
    """A key a family needs is absent from config.json (a KeyError for lookups, a ValueError for callers)."""

    def __str__(self) -> str:
        return str(self.args[0])


class HFConfig(dict):
    """A parsed config.json that remembers its file: `hf["n_embd"]` on a missing key raises an error naming
    the file, the key and the model_type, so no family needs its own try/except."""

    def __init__(self, data: dict[str, Any], file: Path) -> None:
        super().__init__(data)
        self.file = file

    def __missing__(self, key: str) -> Any:
        kind = self.get("model_type", "this")
        raise MissingConfigKey(
            f"{self.file} has no {key!r}, which a {kind} checkpoint needs; add it (transformers writes it) "
            f"or re-save the checkpoint with save_pretrained."
        )


def read_config(path: str | Path) -> HFConfig:
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
    config = _read_json(file)
    if not isinstance(config, dict):
        raise ValueError(f"{file} must hold a JSON object, got {type(config).__name__}.")
    return HFConfig(config, file)


def _read_json(file: Path) -> Any:
    """Parsed JSON of `file`; an error naming the file for bad encoding or syntax."""
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{file} is not valid UTF-8 JSON: {err}.") from None


def read_weights(path: str | Path) -> tuple[dict[str, torch.Tensor], Path]:
    """All tensors of the checkpoint in `path` (single file or sharded with an index) and the file read."""
    folder = Path(path)
    for index_name in INDEX_FILES:
        index = folder / index_name
        if index.is_file():
            tensors: dict[str, torch.Tensor] = {}
            for shard in _shards(index):
                tensors.update(_read_file(folder / shard))
            return tensors, index
    for name in WEIGHT_FILES:
        file = folder / name
        if file.is_file():
            return _read_file(file), file
    raise FileNotFoundError(
        f"{str(folder)!r} has a config.json but no weights: expected one of {', '.join(WEIGHT_FILES + INDEX_FILES)}."
    )


def _shards(index: Path) -> list[str]:
    """The shard file names a `*.index.json` maps tensors to."""
    data = _read_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ValueError(f"{index} has no 'weight_map' of tensor name -> shard file name.")
    return sorted(set(weight_map.values()))


def _read_file(file: Path) -> dict[str, torch.Tensor]:
    """The tensors of one safetensors or pickle file; errors name the file."""
    from zoo.checkpoint import torch_load_failure

    if not file.is_file():
        raise FileNotFoundError(f"Weight file {str(file)!r} (named in the shard index) does not exist.")
    if file.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(file))
        except (SafetensorError, OSError) as err:
            raise ValueError(f"{str(file)!r} is not a readable safetensors file (truncated or corrupt?): {err}.") from None
    try:
        data = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # weights_only refusals, truncated zips and foreign formats alike
        advice = "; convert it to model.safetensors with trusted tools first"
        raise ValueError(torch_load_failure(repr(str(file)), err, advice=advice) + ".") from None
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
