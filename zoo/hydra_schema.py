"""Registers what the Hydra apps (train.py, evaluate.py, inspect_model.py) compose from: ModelConfig as
`model/_schema`, so every preset YAML (which lists `_schema` in its defaults) accepts any ModelConfig key as
an override and rejects misspelled ones, and `data=auto`, the built-in data of the run's task
(zoo.apps.resolve_data)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from hydra.core.config_store import ConfigStore

from zoo.config import ModelConfig

PART_FIELDS = ("positional", "mixer", "layer_pattern", "head")  # typed settings: plain data (a name or a mapping)


def model_schema() -> type:
    """ModelConfig as OmegaConf can type it: the parts untyped (null until a preset gives their mapping,
    which ModelConfig parses), every spine key with its type and default."""
    hints = typing.get_type_hints(ModelConfig)
    spine = [(f.name, hints[f.name], dataclasses.field(default=f.default, default_factory=f.default_factory))
             for f in dataclasses.fields(ModelConfig) if f.name not in PART_FIELDS]
    parts = [(name, Any, dataclasses.field(default=None)) for name in PART_FIELDS]
    return dataclasses.make_dataclass("ModelConfig", parts + spine)


def register_schemas() -> None:
    ConfigStore.instance().store(group="model", name="_schema", node=model_schema())
    ConfigStore.instance().store(group="data", name="auto", node={"name": "auto"})


register_schemas()
