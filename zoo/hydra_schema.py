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

PART_FIELDS = ("positional", "mixer", "linear_mixer", "ffn", "layer_pattern", "head",
               "mtp")  # a name or a mapping


def model_schema() -> type:
    """ModelConfig as OmegaConf can type it: the parts untyped (null until a preset gives their mapping,
    which ModelConfig parses), every spine key with its type and default."""
    hints = typing.get_type_hints(ModelConfig)
    spine = [(f.name, hints[f.name], dataclasses.field(default=f.default, default_factory=f.default_factory))
             for f in dataclasses.fields(ModelConfig) if f.name not in PART_FIELDS]
    parts = [(name, Any, dataclasses.field(default=None)) for name in PART_FIELDS]
    return dataclasses.make_dataclass("ModelConfig", parts + spine)


def part_overrides(overrides: list[str]) -> list[str]:
    """The command line with each `model.<part>=<name>` and `model.<part>={name: ..., ...}` written as the
    whole mapping of that entry (its keys at their defaults, the given ones over them), after a
    `model.<part>=null`: naming an entry replaces the part, and its every key can then be set
    (`model.positional=rope model.positional.base=1e6`). Hydra alone would merge a mapping into the preset's,
    keeping the keys of the entry it had and refusing the new entry's. A key holding a mapping given whole
    (`model.ffn.balance={z: 0.001}`) is replaced the same way, not merged. An override zoo cannot read is
    left for Hydra and the config check to name."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, out = OverridesParser.create(), []
    for item in overrides:
        key = item.split("=", 1)[0]
        table = _table(key)
        if table is not None and "=" in item:
            try:
                value = parser.parse_override(item).value()
            except Exception:  # noqa: BLE001 - an unreadable value: Hydra names it
                value = None
            if isinstance(value, str) or isinstance(value, dict) and "name" in value:
                try:
                    whole = _literal(table.parse(value).to_data())
                except Exception:  # noqa: BLE001 - an unknown name or key: the config check names it, in
                    whole = item.split("=", 1)[1]  # the value as given (not merged into the preset's entry)
                out += [f"{key}=null", f"{key}={whole}"]
                continue
        if "=" in item and not item.startswith(("+", "~")) and _holds_mapping(key):
            out += [f"{key}=null", item]
            continue
        out.append(item)
    return out


def _table(key: str) -> Any:
    """The settings table a `model.<part>[.<nested part>]` key is parsed by, or None."""
    from zoo.config import PARTS

    first, *rest = key.removeprefix("model.").split(".") if key.startswith("model.") else ("",)
    table = PARTS.get(first)
    for name in rest:
        table = table.inner(name) if table is not None else None
    return table


def _holds_mapping(key: str) -> bool:
    """Whether `model.<part>.<key>` is a key some entry holds a whole mapping in (MoE's balance)."""
    parent, _, leaf = key.rpartition(".")
    table = _table(parent)
    return table is not None and leaf in table.mapping_keys()


def _literal(value: Any) -> str:
    """`value` in Hydra's override grammar."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_literal(v) for v in value) + "]"
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return repr(value)


def register_schemas() -> None:
    ConfigStore.instance().store(group="model", name="_schema", node=model_schema())
    ConfigStore.instance().store(group="data", name="auto", node={"name": "auto"})


register_schemas()
