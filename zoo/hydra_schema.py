"""Registers ModelConfig with Hydra as `model/_schema`, so every preset YAML (which lists `_schema` in
its defaults) accepts any ModelConfig key as an override and rejects misspelled ones."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from zoo.config import ModelConfig


def register_schemas() -> None:
    ConfigStore.instance().store(group="model", name="_schema", node=ModelConfig)


register_schemas()
