"""What the user typed on the command line. With `init_from`, the model comes from the pretrained folder, so
only the `model.*` keys the user gave apply (not the default preset's), and the tokenizer comes from the
folder unless a `tokenizer` was chosen. Hydra keeps the command-line overrides in HydraConfig."""

from __future__ import annotations

import re
from typing import Any

OVERRIDE = re.compile(r"^[+~]{0,2}(?P<key>[\w.\-/@]+?)(?:@[\w.]+)?(?:=(?P<value>.*))?$", re.S)


def command_line() -> list[str] | None:
    """The overrides of this Hydra run (`train.py a=b ...`); None outside a Hydra run."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return list(HydraConfig.get().overrides.task)


def _parsed(overrides: list[str]) -> list[tuple[str, str | None]]:
    out = []
    for item in overrides:
        match = OVERRIDE.match(item.strip())
        if match:
            out.append((match["key"], match["value"]))
    return out


def given_in_group(group: str, overrides: list[str], resolved: dict[str, Any]) -> dict[str, Any]:
    """{key: value in the composed config} of every `group.key=...` override."""
    keys = [k.split(".", 1)[1] for k, _ in _parsed(overrides) if k.startswith(group + ".")]
    return {k: resolved.get(k) for k in keys}


def group_given(group: str, overrides: list[str]) -> bool:
    """Whether the user chose the group (`tokenizer=char`) or set one of its keys (`tokenizer.path=...`)."""
    return any(k == group or k.startswith(group + ".") for k, _ in _parsed(overrides))
