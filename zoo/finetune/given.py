"""What the user typed on the command line. With `init_from`, the model comes from the pretrained folder, so
only the `model.*` keys the user gave apply (not the default preset's), and the tokenizer comes from the
folder unless a `tokenizer` was chosen. Hydra keeps the command-line overrides in HydraConfig."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def command_line() -> list[str] | None:
    """The overrides of this Hydra run (`train.py a=b ...`); None outside a Hydra run."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return list(HydraConfig.get().overrides.task)


def _keys(overrides: list[str]) -> list[str]:
    """The keys the overrides set (`model.dropout` of `+model.dropout=0.1`), as Hydra's own parser reads
    them; a deletion (`~model.ffn.capacity_factor`) sets nothing."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides([item.strip() for item in overrides])
    return [o.key_or_group for o in parsed if not o.is_delete()]


def given_in_group(group: str, overrides: list[str], resolved: dict[str, Any]) -> dict[str, Any]:
    """{key: value in the composed config} of every `group.key=...` override; a key inside a mapping
    (`model.ffn.router=...`) is given as `ffn.router`, so only that inner key is laid over the pretrained
    model's part (zoo.config.lay_over), and a deleted one (`~model.ffn.capacity_factor`) not at all."""
    given: dict[str, Any] = {}
    for path in _keys(overrides):
        if path.startswith(group + "."):
            key, _, inner = path[len(group) + 1:].partition(".")
            inner = inner.split(".")[0]
            held = resolved.get(key)
            if not inner:
                given[key] = held
            elif isinstance(held, Mapping) and inner in held:
                given[f"{key}.{inner}"] = held[inner]
    return given


def group_given(group: str, overrides: list[str]) -> bool:
    """Whether the user chose the group (`tokenizer=char`) or set one of its keys (`tokenizer.path=...`)."""
    return any(k == group or k.startswith(group + ".") for k in _keys(overrides))
