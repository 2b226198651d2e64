"""The checkpoint format: atomic writes and validation on open (`zoo.loader.load` restores a model from
it, `zoo.export` writes exports).

A training checkpoint is a Lightning checkpoint plus a `zoo` section holding plain data only
(`CheckpointRecord`: the model config, the task, the tokenizer files as text, the RNG states, what trains). It
opens with `torch.load(weights_only=True)`, once per run (`Checkpoint.read`). An export is a folder:
`model.safetensors`, `config.json`, `tokenizer/`.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from zoo.atomic import atomic_file
from zoo.config import ModelConfig
from zoo.config_moved import upgrade_saved
from zoo.models.vocabulary import check_config
from zoo.modules.layer_pattern import LayerPattern
from zoo.outputs import Output, write_failure
from zoo.tokenizers.texts import tokenizer_differences, tokenizer_texts
from zoo.utils import some

FORMAT_VERSION = 1
EXPORT_WEIGHTS = "model.safetensors"
EXPORT_CONFIG = "config.json"
EXPORT_TOKENIZER = "tokenizer"
CONSOLIDATED_EXTRAS = ("task_state",)  # what a consolidated file keeps beside its weights and zoo section
SHARDED_META = "meta.pt"  # a sharded checkpoint's non-tensor part (Lightning's name for it)
EXPORT_FILES = (EXPORT_WEIGHTS, EXPORT_CONFIG, EXPORT_TOKENIZER)  # all an export folder may hold
# Keys that may differ between a checkpoint and the run resuming it (they change no tensor shape).
RESUMABLE_KEYS = frozenset({"dropout", "attn_dropout"})


class CheckpointError(ValueError):
    """A checkpoint path that is missing, unreadable, not a zoo checkpoint, or incompatible."""


# ----------------------------------------------------------------------------------------- writing


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """torch.save through `atomic_file`: a reader (or a crash) never sees a half-written checkpoint."""
    with atomic_file(path) as f:
        torch.save(obj, f)


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
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(states["cuda"])


@dataclass
class CheckpointRecord:
    """The `zoo` section of a training checkpoint, plain data only: written by `to_dict` and read by
    `from_dict` alone. A key an older checkpoint lacks reads as None (not recorded then)."""

    format_version: int | None = FORMAT_VERSION
    model_config: dict[str, Any] | None = None  # ModelConfig.to_dict()
    task: str | None = None
    tokenizer_files: dict[str, str] | None = None  # zoo.tokenizers.texts.tokenizer_texts
    rng: dict[str, Any] | None = None  # `rng_states` when it was saved
    frozen: list[str] | None = None  # zoo.finetune.freeze.frozen_names (None: saved before zoo recorded it)
    lora: dict[str, Any] | None = None  # zoo.modules.lora.lora_record: the adapters a load rebuilds
    hf_model_type: str | None = None  # the Hugging Face family the weights came from: export format=hf
    wandb_run_id: str | None = None  # the W&B run a resume continues
    # "unfused": q/k/v, gate/value saved as parts (tensor parallel, zoo.modules.unfused); None: fused.
    # read_checkpoint fuses them back for every reader
    layout: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The section as saved (a field left None is not written)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_dict(cls, section: Mapping[str, Any]) -> CheckpointRecord:
        return cls(**{f.name: section.get(f.name) for f in fields(cls)})


def zoo_section(config: ModelConfig, task: str, tokenizer, *,
                tokenizer_files: Mapping[str, str] | None = None, **recorded: Any) -> dict[str, Any]:
    """The `zoo` entry of a checkpoint of `config` trained on `task` with `tokenizer`, with the RNG states of
    now and the other `CheckpointRecord` fields given (what trains, the HF family, the W&B run).
    `tokenizer_files`: `tokenizer_texts(tokenizer)` as the caller already holds them (a run writes its
    tokenizer out once, not at every checkpoint)."""
    files = dict(tokenizer_files) if tokenizer_files is not None else tokenizer_texts(tokenizer)
    return CheckpointRecord(FORMAT_VERSION, config.to_dict(), task, files, rng_states(), **recorded).to_dict()


# ----------------------------------------------------------------------------------------- reading


@dataclass
class Checkpoint:
    """A training checkpoint read once: its path, the dict Lightning resumes from, and its zoo record."""

    path: Path
    data: dict[str, Any]
    record: CheckpointRecord

    @classmethod
    def read(cls, path: str | os.PathLike, *, shards: bool = True, mmap: bool = False) -> Checkpoint:
        """`read_checkpoint` (every check, one clear error naming the file), its record parsed.
        `shards=False`: a sharded checkpoint's tensors are not read (its state dict holds their shapes, on
        the meta device), for a resume whose strategy reads its own shards. `mmap`: see read_checkpoint."""
        data = read_checkpoint(path, shards=shards, mmap=mmap)
        return cls(Path(path), data, CheckpointRecord.from_dict(data["zoo"]))


def checkpoint_file(path: str | os.PathLike) -> Path:
    """`path` when a checkpoint is there (nothing read): a file, or a sharded checkpoint's folder;
    CheckpointError for nothing there or another folder."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.is_dir() and not is_sharded(path):
        raise CheckpointError(f"{path} is a directory, not a checkpoint file nor a sharded checkpoint (no "
                              f"{SHARDED_META}; exports load with zoo.load)")
    return path


def is_sharded(path: str | os.PathLike) -> bool:
    """Whether `path` is a sharded checkpoint: a folder of torch.distributed.checkpoint shards (each rank
    wrote its own) with the rest of the Lightning checkpoint in `meta.pt` (zoo.training.sharding)."""
    return Path(path).is_dir() and (Path(path) / SHARDED_META).is_file()


def read_sharded(path: Path, *, shards: bool = True) -> dict[str, Any]:
    """A sharded checkpoint as one process's full checkpoint dict: `meta.pt` (epoch, loops, the zoo
    section) with the whole `state_dict` assembled from every rank's shards (`shards=False`: meta-device
    tensors of the saved shapes, from the folder's index alone); the optimizer states stay in the folder (they
    resume through the sharded strategy, which reshards them to its world size)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    meta = torch.load(path / SHARDED_META, map_location="cpu", weights_only=True)
    if not shards:
        index = FileSystemReader(path).read_metadata().state_dict_metadata  # "state_dict.<name>" -> sizes
        shapes = {k.removeprefix("state_dict."): torch.empty(tuple(m.size), device="meta")
                  for k, m in index.items() if k.startswith("state_dict.") and hasattr(m, "size")}
        return {**meta, "state_dict": shapes} if isinstance(meta, dict) else meta
    tensors: dict[str, Any] = {}
    # torch's own converter (format_utils.dcp_to_torch_save) reads this way: the planner rebuilds the dict
    # from the folder's metadata, no_dist: this process alone, also inside a distributed run (no collective)
    _load_state_dict(tensors, storage_reader=FileSystemReader(path),
                     planner=_EmptyStateDictLoadPlanner(keys={"state_dict"}), no_dist=True)
    return {**meta, "state_dict": tensors["state_dict"]} if isinstance(meta, dict) else meta


def consolidate(sharded: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write the sharded checkpoint folder `sharded` as one checkpoint file `out` (atomically): its zoo
    section, whole state dict and task state (task=dpo's settings and precomputed reference log-probs, which
    evaluate.py reads), which `zoo.load`, generate, evaluate and export read like any checkpoint. The
    optimizer states stay behind (resume from the folder itself, with trainer=fsdp). Returns `out`."""
    if not checkpoint_file(sharded).is_dir():
        raise CheckpointError(f"{sharded} is a checkpoint file already, not a sharded checkpoint folder")
    out = CHECKPOINT_OUTPUT.check(out)  # a new file or one zoo wrote, before any shard is read
    data = read_checkpoint(sharded)  # a tensor-parallel run's parts fused back: the file holds them fused
    record = {k: v for k, v in data["zoo"].items() if k != "layout"}
    kept = {k: data[k] for k in CONSOLIDATED_EXTRAS if data.get(k) is not None}  # task=dpo: its settings
    try:
        atomic_torch_save({"state_dict": data["state_dict"], "zoo": record, **kept}, out)
    except OSError as e:
        raise write_failure(f"out={out}", e) from None
    return out


def consolidated(path: Path) -> bool:
    """Whether `path` is a file `consolidate` wrote: a zoo checkpoint of its state dict and zoo section alone
    (a training checkpoint, with its optimizer and loop state, is not replaced); tensors mapped, not read."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # not a PyTorch zip file, or a pickle weights_only refuses: not zoo's
        return False
    return (isinstance(data, dict) and {"state_dict", "zoo"} <= set(data)
            and set(data) <= {"state_dict", "zoo", *CONSOLIDATED_EXTRAS} and isinstance(data["zoo"], dict)
            and "format_version" in data["zoo"])


CHECKPOINT_OUTPUT = Output("out", "a consolidated zoo checkpoint", folder=False, ours=consolidated,
                           example="model.ckpt")


def read_checkpoint(path: str | os.PathLike, *, shards: bool = True, mmap: bool = False) -> dict[str, Any]:
    """torch.load(weights_only=True) with one clear error, naming the file, for a missing file, a file that
    is not a PyTorch checkpoint, one without a valid zoo section, or weights that do not fit its config
    (`shards`: see `read_sharded`). `mmap` (a file): its tensors are mapped, read from disk when touched
    (a reader that takes them one at a time never holds them all)."""
    path = checkpoint_file(path)
    try:
        ckpt = read_sharded(path, shards=shards) if path.is_dir() else torch.load(
            path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # pickle, zip and torch errors alike mean "not a checkpoint"
        raise CheckpointError(torch_load_failure(path, e)) from None
    if not (isinstance(ckpt, dict) and all(isinstance(ckpt.get(k), dict) for k in ("zoo", "state_dict"))):
        raise CheckpointError(f"{path} is a PyTorch file but not a zoo training checkpoint "
                              "(no 'zoo' section)")
    record = CheckpointRecord.from_dict(ckpt["zoo"])
    if record.format_version != FORMAT_VERSION:
        raise CheckpointError(f"{path}: zoo checkpoint format {record.format_version!r}, "
                              f"expected {FORMAT_VERSION}")
    if record.layout == "unfused":  # a tensor-parallel run's: every reader gets the fused layout
        ckpt["state_dict"], ckpt["zoo"] = checked_fuse(ckpt["state_dict"], ckpt["zoo"], path)
        record = CheckpointRecord.from_dict(ckpt["zoo"])
    check_state_shapes(ckpt["state_dict"], record, path)
    return ckpt


def checked_fuse(state_dict: dict[str, Any], section: dict[str, Any], path: str | os.PathLike
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """An unfused state dict (zoo.modules.unfused) and its zoo section's names of parts (LoRA paths, frozen
    parameters) in the fused layout; CheckpointError naming the file."""
    from zoo.modules.unfused import fuse_state_dict, fused_names

    section = dict(section)
    if section.get("frozen") is not None:
        section["frozen"] = fused_names(section["frozen"])
    if section.get("lora") is not None:
        section["lora"] = {**section["lora"], "paths": fused_names(section["lora"]["paths"])}
    try:
        return fuse_state_dict(state_dict), section
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None


PYTORCH_HEADS = (b"PK\x03\x04", b"\x80")  # torch.save's zip archive; a pickle of protocol >= 2 (legacy)


def torch_load_failure(file: str | os.PathLike, err: BaseException, advice: str = "", *,
                       path: str | os.PathLike | None = None) -> str:
    """One line on why torch.load(weights_only=True) failed on `file` (`advice` is added to a refused
    pickle; `path`: the file to look at when `file` is only its name as shown). A file that does not begin as
    a PyTorch file (text, even text whose first byte happens to be a pickle opcode) is "not a PyTorch
    checkpoint". torch's hint that weights_only=False "will likely succeed" is left out: that runs the file's
    code."""
    head = _first_bytes(path if path is not None else file)
    if head and not head.startswith(PYTORCH_HEADS):
        return f"{file} is not a PyTorch checkpoint (it starts with {head!r}: text or another format)"
    text = str(err)
    if "WeightsUnpickler" not in text and "weights_only" not in text:
        first = text.strip().splitlines()[0].split(". ")[0] if text.strip() else ""  # torch adds paragraphs
        kind = "truncated, corrupt or another format"
        return f"{file} is not a readable PyTorch file ({kind}): {type(err).__name__}: {first}"
    detail = re.search(r"WeightsUnpickler error: (.*?)(?= Please use|\n|$)", text)
    why = f" ({detail.group(1).strip()})" if detail else ""
    return (f"{file} is a pickle that needs arbitrary code to load{why}; zoo opens files with "
            f"torch.load(weights_only=True) and never unpickles untrusted code{advice}")


def _first_bytes(path: str | os.PathLike, n: int = 12) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def saved_model_config(saved: Any, where: str) -> ModelConfig:
    """The ModelConfig stored in a checkpoint or export; `where` names the file and key in the error."""
    if not isinstance(saved, Mapping):
        raise CheckpointError(f"{where} is missing or not a mapping (got {type(saved).__name__}); it should "
                              "hold the model config")
    try:
        config = ModelConfig.from_dict(upgrade_saved(saved))  # the layout before issue 35 upgraded
        check_config(config)
        return config
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{where} is not a valid model config: {e}") from None


def check_state_shapes(state_dict: Mapping[str, Any], record: CheckpointRecord, path: str | os.PathLike
                       ) -> None:
    """Raise CheckpointError naming every tensor of the checkpoint that is missing, unknown or wrong-shaped
    for the model its saved config builds (built on the meta device: no memory, no initialisation)."""
    from zoo.presets import build

    config = saved_model_config(record.model_config, f"{path}: zoo.model_config")
    with torch.device("meta"):
        model = build(config)
        restore_adapters(model, record, path)
    state = model_state(state_dict)
    shapes = {k: tuple(v.shape) if isinstance(v, torch.Tensor) else None for k, v in state.items()}
    problems = state_problems(shapes, model, tied_stored_once=False)
    if problems:
        raise CheckpointError(f"{path}: the weights do not fit the model config saved with them: {problems}")


def state_problems(shapes: Mapping[str, tuple[int, ...] | None], model: torch.nn.Module, *,
                   tied_stored_once: bool) -> str:
    """Wrong shapes, missing and unknown names of `shapes` (None = not a tensor) against `model`'s state
    dict, as one line ("" when they fit). `tied_stored_once`: a tied tensor may be stored under one of its
    names."""
    expected = model.state_dict(keep_vars=True)
    aliases: dict[int, list[str]] = {}
    for name, tensor in expected.items():
        aliases.setdefault(id(tensor), []).append(name)
    wrong = [f"{k} is not a tensor" if shape is None
             else f"{k} has shape {shape}, the model needs {tuple(expected[k].shape)}"
             for k, shape in shapes.items() if k in expected and shape != tuple(expected[k].shape)]
    missing = [k for k in expected if k not in shapes
               and not (tied_stored_once and any(a in shapes for a in aliases[id(expected[k])]))]
    unknown = [k for k in shapes if k not in expected]
    parts = [_listed("wrong tensor", wrong), _listed("missing tensor", missing),
             _listed("unknown tensor", unknown)]
    return "; ".join(p for p in parts if p)


def _listed(what: str, items: list[str]) -> str:
    """'2 wrong tensors: a, b' (at most 5 shown); '' for none."""
    return f"{len(items)} {what}{'s' if len(items) > 1 else ''}: {some(items, 5)}" if items else ""


def check_compatible(saved_record: CheckpointRecord, config: ModelConfig, task: str, path: str | os.PathLike,
                     tokenizer) -> None:
    """Raise CheckpointError naming every model key, the task and every tokenizer part where the checkpoint
    differs from this run: same-size but different tokenizers make embedding rows mean other tokens."""
    # a key an older checkpoint lacks is a knob added since, whose default keeps the old behaviour
    # (saved_model_config fills them and reads the layout before issue 35)
    saved = saved_model_config(saved_record.model_config, f"{path}: zoo.model_config").to_dict()
    current = config.to_dict()
    depth = max(config.n_encoder_layers, config.n_decoder_layers)  # the layers a pattern builds, compared
    saved["layer_pattern"] = LayerPattern.parse(saved["layer_pattern"]).expanded(depth)
    current["layer_pattern"] = config.layer_pattern.expanded(depth)
    diffs = [
        f"model.{key}: checkpoint {saved.get(key)!r}, this run {value!r}"
        for key, value in current.items()
        if key not in RESUMABLE_KEYS and saved.get(key) != value
    ]
    if saved_record.task != task:
        diffs.append(f"task: checkpoint {saved_record.task!r}, this run {task!r}")
    changed = tokenizer_differences(saved_record.tokenizer_files or {}, tokenizer_texts(tokenizer))
    diffs += [f"tokenizer {d}" for d in changed]
    own = Path(path).parent.parent / EXPORT_TOKENIZER  # the run folder's tokenizer/ (written at its start)
    hint = (f". To resume with the checkpoint's tokenizer: tokenizer=file tokenizer.path={own}"
            if changed and (own / "tokenizer.json").is_file() else "")
    if diffs:
        raise CheckpointError(f"checkpoint {path} does not match this run: " + "; ".join(diffs) + hint)


def model_state(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's tensors of a Lightning state dict (its `model.` prefix removed)."""
    return {k.removeprefix("model."): v for k, v in state_dict.items() if k.startswith("model.")}


def restore_adapters(model: torch.nn.Module, record: CheckpointRecord, path: str | os.PathLike) -> None:
    """The LoRA layers a fine-tuning run saved (`zoo.lora`), so its weights load; none for others."""
    if record.lora is None:
        return
    from zoo.modules.adapters import restore_lora

    try:
        restore_lora(model, record.lora, f"{path}: zoo.lora")
    except ValueError as e:
        raise CheckpointError(str(e)) from None
