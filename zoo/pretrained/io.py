"""Reading and writing Hugging Face checkpoint directories: `config.json` plus `model.safetensors` or
`pytorch_model.bin`. Pickles are opened with `torch.load(weights_only=True)` only, so a checkpoint can
never run code on load. A save into a folder that holds a checkpoint leaves the old one or the new one at
every moment (see `write_checkpoint`, which follows zoo.atomic's protocol)."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import torch

from zoo.atomic import default_mode, fsync_path, sweep, temp_path
from zoo.outputs import Output

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
SAFE_WEIGHTS, CONFIG = "model.safetensors", "config.json"
SAVE_ID = "zoo_save_id"  # in config.json and in model.safetensors' metadata: the save that wrote them
# A save's files wait beside their place under zoo.atomic's temp names, whose random part is the save id;
# older versions named them `.zoo-save-<id>.<name>`.
OLD_PENDING = ".zoo-save-"


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


def read_config(path: str | Path, parsed: Any = None) -> HFConfig:
    """The parsed `config.json` of checkpoint directory `path`; a clear error if it is not one. `parsed`: that
    file's content already parsed by the caller (init_from recognises a folder by it), not parsed again."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"Checkpoint directory {str(folder)!r} does not exist "
                                "(or is not a directory).")
    weights_id = weights_save_id(folder)
    file = _config_file(folder, weights_id)
    if not file.is_file():
        present = sorted(p.name for p in folder.iterdir())[:10]
        raise FileNotFoundError(
            f"{str(folder)!r} has no config.json, so it is not a Hugging Face checkpoint directory "
            f"(found: {', '.join(present) or 'nothing'})."
        )
    config = parsed if parsed is not None and file == folder / CONFIG else _read_json(file)
    if not isinstance(config, dict):
        raise ValueError(f"{file} must hold a JSON object, got {type(config).__name__}.")
    _check_same_save(folder, config, weights_id)
    return HFConfig(config, file)


def weights_save_id(folder: Path) -> str | None:
    """The `zoo_save_id` in `model.safetensors`' metadata; None if there is none (a bad file is reported
    when the weights are read)."""
    from safetensors import safe_open

    try:
        with safe_open(str(folder / SAFE_WEIGHTS), framework="pt") as f:
            return (f.metadata() or {}).get(SAVE_ID)
    except Exception:  # missing, truncated or not safetensors: read_weights says which
        return None


def _config_file(folder: Path, weights_id: str | None) -> Path:
    """config.json, or the pending config of a save killed after renaming its weights in but before its
    config (`weights_id`, the save id in `model.safetensors`, names that save)."""
    if weights_id and re.fullmatch(r"[0-9a-f]{16}", weights_id):
        pending = [*folder.glob(f".{CONFIG}.*.{weights_id}.tmp"),
                   folder / f"{OLD_PENDING}{weights_id}.{CONFIG}"]
        return next((p for p in pending if p.is_file()), folder / CONFIG)
    return folder / CONFIG


def _check_same_save(folder: Path, config: dict[str, Any], weights_id: str | None) -> None:
    """Refuse config.json and model.safetensors that two different zoo saves wrote: the config may not
    describe the weights (same shapes, other settings would load silently wrong)."""
    config_id = config.get(SAVE_ID)
    if config_id and weights_id and config_id != weights_id:
        raise ValueError(
            f"{str(folder)!r}: config.json (zoo_save_id {config_id!r}) and model.safetensors (zoo_save_id "
            f"{weights_id!r}) were written by different saves, so the config may not describe the weights. "
            f"Save the model again, or delete 'zoo_save_id' from config.json if this pair is meant."
        )


def _read_json(file: Path) -> Any:
    """Parsed JSON of `file`; an error naming the file for bad encoding or syntax."""
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{file} is not valid UTF-8 JSON: {err}.") from None


def read_weights(path: str | Path) -> tuple[dict[str, torch.Tensor], Path]:
    """All tensors of the checkpoint in `path` (single file or sharded with an index) and the file read."""
    folder = Path(path)
    # transformers' order: each format's single file before its index, safetensors before pickles
    for single, index_name in zip(WEIGHT_FILES, INDEX_FILES, strict=True):
        if (folder / single).is_file():
            return _read_file(folder / single), folder / single
        index = folder / index_name
        if index.is_file():
            tensors: dict[str, torch.Tensor] = {}
            for shard in shard_names(index):
                tensors.update(_read_file(folder / shard))
            return tensors, index
    raise FileNotFoundError(
        f"{str(folder)!r} has a config.json but no weights: expected one of "
        f"{', '.join(WEIGHT_FILES + INDEX_FILES)}."
    )


def shard_names(index: Path) -> list[str]:
    """The shard file names a `*.index.json` maps tensors to."""
    data = _read_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ValueError(f"{index} has no 'weight_map' of tensor name -> shard file name.")
    outside = sorted({v for v in weight_map.values() if Path(v).name != v or v in ("", ".", "..")})
    if outside:  # shards live beside their index; a path could read (or, on save, delete) other files
        raise ValueError(f"{index} names shard files outside its folder: {outside[:3]}; shard names must be "
                         "plain file names.")
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
            raise ValueError(f"{str(file)!r} is not a readable safetensors "
                             f"file (truncated or corrupt?): {err}.") from None
    try:
        data = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # weights_only refusals, truncated zips and foreign formats alike
        advice = "; convert it to model.safetensors with trusted tools first"
        raise ValueError(torch_load_failure(repr(str(file)), err, advice=advice, path=file) + ".") from None
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise ValueError(f"{str(file)!r} does not hold a flat state dict of tensors "
                         f"(got {type(data).__name__}).")
    return data


def write_checkpoint(path: str | Path, config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Path:
    """Write `config.json` and `model.safetensors` into `path` so that every moment leaves the old checkpoint
    or the new one. Both carry one `zoo_save_id`; the weights are renamed in first, and until config.json
    follows, zoo reads the save's pending config. Stale weights of the old checkpoint go; other files stay."""
    from safetensors.torch import save_file

    folder = PRETRAINED_OUTPUT.check(path)  # before anything there is touched
    folder.mkdir(parents=True, exist_ok=True)
    _finish_interrupted_save(folder)
    save_id = uuid.uuid4().hex[:16]
    weights, config_file = (temp_path(folder / name, token=save_id) for name in (SAFE_WEIGHTS, CONFIG))
    try:
        plain = {name: t.detach().to("cpu").contiguous().clone() for name, t in tensors.items()}  # unshared
        save_file(plain, str(weights), metadata={"format": "pt", SAVE_ID: save_id})
        default_mode(weights)  # safetensors writes 0600
        config_file.write_text(json.dumps({**config, SAVE_ID: save_id}, indent=2, sort_keys=True) + "\n",
                               encoding="utf-8")
        for written in (weights, config_file, folder):
            fsync_path(written)
        os.replace(weights, folder / SAFE_WEIGHTS)  # zoo reads the new model from here on
    except BaseException:
        if weights.exists():  # not renamed in: the old checkpoint stands, the new one goes
            weights.unlink()
            config_file.unlink(missing_ok=True)
        raise
    os.replace(config_file, folder / CONFIG)  # transformers reads the new model from here on
    fsync_path(folder)
    _remove_stale_weights(folder)
    return folder


def holds_checkpoint_only(folder: Path) -> bool:
    """Whether what a save replaces or deletes in `folder` is absent or a model checkpoint's (so no file of
    the user's is lost; other files stay): config.json a JSON object naming a `model_type` (a Hugging Face
    checkpoint's, zoo's included), weights and indexes in their formats."""
    found = {name for name in (CONFIG, *WEIGHT_FILES, *INDEX_FILES) if os.path.lexists(folder / name)}
    try:
        if CONFIG in found:
            config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
            if not (isinstance(config, dict) and ("model_type" in config or SAVE_ID in config)):
                return False
        if SAFE_WEIGHTS in found:
            from safetensors import safe_open

            with safe_open(str(folder / SAFE_WEIGHTS), "pt"):  # its header alone is read
                pass
        if "pytorch_model.bin" in found:
            from zoo.checkpoint import PYTORCH_HEADS

            with open(folder / "pytorch_model.bin", "rb") as f:
                if not f.read(4).startswith(PYTORCH_HEADS):
                    return False
        return all("weight_map" in json.loads((folder / name).read_text(encoding="utf-8"))
                   for name in INDEX_FILES if name in found)
    except Exception:  # unreadable, not JSON, not safetensors: not a checkpoint's file
        return False


PRETRAINED_OUTPUT = Output("path", "a model checkpoint folder", folder=True, ours=holds_checkpoint_only,
                           replaces="a checkpoint's config.json, weights and indexes (other files stay)")


def _finish_interrupted_save(folder: Path) -> None:
    """Complete a save killed between its two renames, then delete what saves killed earlier left."""
    config_file = _config_file(folder, weights_save_id(folder))
    if config_file.name != CONFIG:
        os.replace(config_file, folder / CONFIG)
    sweep(folder, f"{re.escape(SAFE_WEIGHTS)}|{re.escape(CONFIG)}", shared=False)
    for leftover in folder.glob(f"{OLD_PENDING}*"):
        if leftover.is_file():
            leftover.unlink()


def _remove_stale_weights(folder: Path) -> None:
    """Delete the weight files an older checkpoint left beside the new `model.safetensors`:
    `pytorch_model.bin`, the index files and the weight files they name (`shard_names` allows plain names in
    this folder only; an index that does not parse names none)."""
    for index in (folder / name for name in INDEX_FILES):
        if not index.is_file():
            continue
        try:
            names = shard_names(index)
        except (OSError, ValueError):
            names = []
        for name in names:
            if not name.startswith(".") and name.endswith((".safetensors", ".bin")) and name != SAFE_WEIGHTS:
                (folder / name).unlink(missing_ok=True)
        index.unlink()
    (folder / "pytorch_model.bin").unlink(missing_ok=True)
