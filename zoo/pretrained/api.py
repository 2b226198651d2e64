"""`from_pretrained(dir)` builds a zoo model from a Hugging Face checkpoint directory; `save_pretrained`
writes one that `transformers` loads. The family is chosen by config.json's `model_type`."""

from __future__ import annotations

from pathlib import Path

import torch

import zoo.pretrained.families  # noqa: F401  (registers every family)
from zoo.config import ModelConfig
from zoo.models import ZooModel, build_model
from zoo.pretrained.family import FAMILIES, Family, HFTensors
from zoo.pretrained.io import read_config, read_weights, write_checkpoint
from zoo.pretrained.roundtrip import check_roundtrip
from zoo.quantization import float_state_dict
from zoo.registry import unknown_choice_message


def family_for(model_type: str) -> Family:
    """The registered converter for HF `model_type`; an unknown one lists the supported types."""
    if model_type not in FAMILIES:
        raise ValueError(
            "Unsupported checkpoint: " + unknown_choice_message("Hugging Face model_type", model_type, FAMILIES.names())
        )
    return FAMILIES.get(model_type)()


def load_config(path: str | Path) -> tuple[Family, ModelConfig]:
    """The family and zoo config of a checkpoint directory (no weights read)."""
    hf = read_config(path)
    if "model_type" not in hf:
        raise ValueError(f"{Path(path) / 'config.json'} has no 'model_type'; supported: {', '.join(FAMILIES.names())}.")
    family = family_for(hf["model_type"])
    return family, family.config_from_hf(hf)


def from_pretrained(path: str | Path, **overrides) -> ZooModel:
    """A zoo model (eval mode, fp32) with the weights of HF checkpoint directory `path`.
    `overrides` replace config fields that do not change weight shapes (e.g. `dropout=0.0`)."""
    family, config = load_config(path)
    if overrides:
        config = ModelConfig.from_dict({**config.to_dict(), **overrides})
    tensors, file = read_weights(path)
    state = family.state_from_hf(HFTensors(tensors, str(file), family.prefixes), config)
    model = build_model(config)
    model.load_state_dict(state, strict=True)
    model.pretrained_family = family.model_type  # export writes the same family back by default
    return model.eval()


def export_family(model: ZooModel, model_type: str | None = None) -> Family:
    """The family to export `model` as: given, remembered from import, or the first whose knobs fit."""
    model_type = model_type or getattr(model, "pretrained_family", None)
    if model_type is not None:
        return family_for(model_type)
    reasons = []
    for name in FAMILIES.names():
        family = FAMILIES.get(name)()
        try:
            hf_config(family, model.config)
            return family
        except ValueError as err:
            reasons.append(str(err))
    raise ValueError("No Hugging Face family can represent this zoo model:\n  " + "\n  ".join(reasons))


def save_pretrained(model: ZooModel, path: str | Path, *, model_type: str | None = None) -> Path:
    """Write `config.json` + `model.safetensors` into `path` in the layout `transformers` loads. Other files
    in the folder stay; weight files of an older checkpoint there go; a save stopped at any point leaves the
    old model or the new one."""
    family = export_family(model, model_type)
    config = hf_config(family, model.config)
    state = {k: t.detach().float() for k, t in float_state_dict(model).items()}  # int8 layers dequantised
    with torch.no_grad():
        tensors = family.state_to_hf(state, model.config)
    return write_checkpoint(path, config, tensors)


def hf_config(family: Family, cfg: ModelConfig) -> dict:
    """The family's config.json for `cfg`, checked to read back as the same model (no knob silently lost)."""
    out = family.config_to_hf(cfg)
    check_roundtrip(cfg, family.config_from_hf(out), family.model_type, family.same_model)
    return out
