"""Registers what the Hydra apps (train.py, evaluate.py, inspect_model.py) compose from: ModelConfig as
`model/_schema`, so every preset YAML (which lists `_schema` in its defaults) accepts any ModelConfig key as
an override and rejects misspelled ones, and `data=auto`, the built-in data of the run's task
(zoo.apps.resolve_data)."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from zoo.config import ModelConfig


def register_schemas() -> None:
    ConfigStore.instance().store(group="model", name="_schema", node=ModelConfig)
    ConfigStore.instance().store(group="data", name="auto", node={"name": "auto"})


register_schemas()
