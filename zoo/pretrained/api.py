"""`from_pretrained(dir)` builds a zoo model from a Hugging Face checkpoint directory; `save_pretrained`
writes one that `transformers` loads. The family is chosen by config.json's `model_type`, the head by its
`architectures` (zoo.pretrained.heads)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from zoo.config import ModelConfig, lay_over
from zoo.models import ZooModel, build_model
from zoo.pretrained.families import export_order
from zoo.pretrained.family import FAMILIES, Family, HFTensors
from zoo.pretrained.fp8 import dequantized, fp8_block, is_quantization_tensor
from zoo.pretrained.headers import check_folder, check_layers, explained, header_shapes
from zoo.pretrained.io import HFConfig, read_config, read_weights, write_checkpoint
from zoo.pretrained.roundtrip import check_roundtrip
from zoo.pretrained.tensor_map import ShapeMismatch
from zoo.quantization import float_state_dict
from zoo.registry import unknown_choice_message

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def family_for(model_type: str) -> Family:
    """The registered converter for HF `model_type`; an unknown one lists the supported types."""
    if model_type not in FAMILIES:
        raise ValueError(
            "Unsupported checkpoint: "
            + unknown_choice_message("Hugging Face model_type", model_type, FAMILIES.names())
        )
    return FAMILIES.get(model_type)()


def _family(hf: Mapping[str, Any], path: str | Path) -> Family:
    if "model_type" not in hf:
        raise ValueError(f"{Path(path) / 'config.json'} has no 'model_type'; supported: "
                         f"{', '.join(FAMILIES.names())}.")
    return family_for(hf["model_type"])


def load_config(path: str | Path, hf: HFConfig | None = None) -> tuple[Family, ModelConfig]:
    """The family and zoo config of a checkpoint directory (no weights read; its layer count checked against
    the safetensors headers). `hf`: its config.json as the caller read it."""
    hf = hf if hf is not None else read_config(path)
    family = _family(hf, path)
    found = header_shapes(Path(path))
    config = family.config_from_hf(hf)
    if found is not None:  # pickled weights: config.json says
        config = family.fit_stored(config, found[0])
    check_folder(family, config, Path(path))
    return family, config


@dataclass
class Pretrained:
    """A Hugging Face folder read once: its family, the zoo config (fitted to the weight file), the weights as
    a zoo state dict, the label names of a classifier head (config.json's id2label) and the file's dtype."""

    family: Family
    config: ModelConfig
    state: dict[str, torch.Tensor]
    label_names: list[str] | None = None
    file_dtype: torch.dtype | None = None
    new_head: list[str] = field(default_factory=list)  # head tensors the file lacked (head_optional)


def read_pretrained(path: str | Path, overrides: Mapping[str, Any] | None = None, *,
                    head_optional: bool = False, hf: HFConfig | None = None) -> Pretrained:
    """Config and weights of HF folder `path`. `overrides` replace config fields that keep weight shapes (a
    part given as a mapping without a name changes only its keys: `mixer={"softcap": None}`, lay_over);
    `head_optional` (init_from): a head whose tensors the file lacks is left out instead of failing; `hf`: its
    config.json as the caller read it (`read_config`), not read again."""
    if is_gguf(path):
        return _read_gguf(path, overrides)
    hf = hf if hf is not None else read_config(path)
    family = _family(hf, path)
    config = family.config_from_hf(hf)
    found = header_shapes(Path(path))
    tensors, file = read_weights(path) if found is None else (None, None)  # pickles: names once read
    config = family.fit_stored(config, found[0] if found is not None else tensors, overrides or ())
    if overrides:
        config = ModelConfig.from_dict(lay_over(config.to_dict(), overrides))
    check_folder(family, config, Path(path))  # sizes against the safetensors headers, before any read
    block = fp8_block(hf)  # FP8 weights: dequantized once read
    if tensors is None:
        tensors, file = read_weights(path)
    check_layers(family, config, {k: tuple(t.shape) for k, t in tensors.items()}, file)  # pickles: now
    file_dtype = _file_dtype({k: t for k, t in tensors.items() if not is_quantization_tensor(k, t)})
    if block is not None:
        tensors = dequantized(tensors, block)
    src = HFTensors(tensors, str(file), family.prefixes)
    src.head_optional = head_optional
    try:
        config = family.fitted(config, src)
        with torch.no_grad():
            state = family.state_from_hf(src, config)
    except ShapeMismatch as err:
        raise explained(err, family, config) from None
    return Pretrained(family, config, state, family.label_names(hf, config), file_dtype, src.new_head)


def is_gguf(path: str | Path) -> bool:
    """Whether `path` is a GGUF file (llama.cpp's format, known by its magic bytes whatever its name; read by
    zoo.pretrained.gguf_file)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:  # a folder, or nothing there
        return False


def _read_gguf(path: str | Path, overrides: Mapping[str, Any] | None) -> Pretrained:
    """A GGUF file read as a Pretrained: its weights dequantised to float32 (the file's dtype)."""
    from zoo.pretrained.gguf_file import read_gguf

    family, config, state = read_gguf(path)
    if overrides:
        config = ModelConfig.from_dict(lay_over(config.to_dict(), overrides))
    return Pretrained(family, config, state, None, torch.float32)


def _file_dtype(tensors: Mapping[str, torch.Tensor]) -> torch.dtype | None:
    """The dtype most floating tensors of the file are stored in."""
    counts = Counter(t.dtype for t in tensors.values() if t.is_floating_point())
    return counts.most_common(1)[0][0] if counts else None


def resolve_dtype(dtype: str | torch.dtype | None, file_dtype: torch.dtype | None) -> torch.dtype:
    """from_pretrained's `dtype`: None -> float32 (zoo's default, whatever the file holds), "auto" -> the
    weight file's own dtype (transformers 5's default), or float32 / float16 / bfloat16 by name or torch
    dtype."""
    if dtype is None:
        return torch.float32
    if dtype == "auto":
        return file_dtype or torch.float32
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype.removeprefix("torch.") in DTYPES:
        return DTYPES[dtype.removeprefix("torch.")]
    raise ValueError(f"from_pretrained dtype={dtype!r} is not supported; allowed: None (float32), 'auto' "
                     f"(the weight file's dtype), {', '.join(DTYPES)} (names or torch dtypes).")


def from_pretrained(path: str | Path, *, dtype: str | torch.dtype | None = None, **overrides) -> ZooModel:
    """A zoo model (eval mode) with the weights of HF checkpoint directory `path` (or of a `.gguf` file,
    dequantised: zoo.pretrained.gguf_file), its head the one
    config.json's `architectures` names (BertModel: none, *ForMaskedLM: lm, *ForSequenceClassification:
    classifier, ...). `dtype`: None keeps fp32 whatever the file holds; "auto" the file's dtype (as
    transformers 5); or float32 / float16 / bfloat16. `overrides` replace config fields that do not change
    weight shapes (e.g. `dropout=0.0`); `mtp=None` leaves out the multi-token-prediction layers a DeepSeek-V3
    file holds (with a warning naming them)."""
    resolve_dtype(dtype, None)  # a bad dtype fails before any file is read
    read = read_pretrained(path, overrides)
    model = build_model(read.config)
    model.load_state_dict(read.state, strict=True)
    model.pretrained_family = read.family.model_type  # export writes the same family back by default
    model.label_names = read.label_names  # a classifier's id2label: export writes them back
    return model.to(resolve_dtype(dtype, read.file_dtype)).eval()


def export_family(model: ZooModel, model_type: str | None = None) -> Family:
    """The family to export `model` as: given, remembered from import, or the first whose knobs fit."""
    model_type = model_type or model.pretrained_family
    if model_type is not None:
        return family_for(model_type)
    reasons = []
    for name in export_order():
        family = FAMILIES.get(name)()
        try:
            hf_config(family, model.config)
            return family
        except ValueError as err:
            reasons.append(str(err))
    raise ValueError("No Hugging Face family can represent this zoo model:\n  " + "\n  ".join(reasons))


def save_pretrained(model: ZooModel, path: str | Path, *, model_type: str | None = None,
                    label_names: Sequence[str] | None = None) -> Path:
    """Write `config.json` + `model.safetensors` into `path` in the layout `transformers` loads, as the class
    of the model's head (BertModel, BertForSequenceClassification, ...). A classifier's `id2label` /
    `label2id` come from `label_names`, else the names it was loaded with, else transformers' LABEL_i. Other
    files in the folder stay; weight files of an older checkpoint there go; a save stopped at any point leaves
    the old model or the new one."""
    family = export_family(model, model_type)
    config = hf_config(family, model.config)
    names = label_names if label_names is not None else getattr(model, "label_names", None)
    config.update(family.label_config(model.config, names))
    state = {k: t.detach().float() for k, t in float_state_dict(model).items()}  # int8 layers dequantised
    with torch.no_grad():
        tensors = family.state_to_hf(state, model.config)
    return write_checkpoint(path, config, tensors)


def hf_config(family: Family, cfg: ModelConfig) -> dict:
    """The family's config.json for `cfg`, checked to read back as the same model (no knob silently lost)."""
    out = family.config_to_hf(cfg)
    check_roundtrip(cfg, family.read_back(out, cfg), family.model_type, family.same_model)
    return out
