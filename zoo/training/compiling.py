"""`compile.*`: whether and how the training module compiles its model. `compile.enabled: auto` compiles on
CUDA only: on CPU a 25-240 s compile pays back too uncertainly (docs/training.md#compiled-training)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

AUTO_ON = frozenset({"cuda"})  # device types where compile.enabled=auto compiles
DEFAULT_BACKEND = "inductor"  # torch.compile's default backend (and conf/config.yaml's compile.backend)


def wants_compile(cfg: Mapping[str, Any] | None, device: torch.device | str) -> bool:
    """compile.enabled true / false, or `auto`: true on the device types in AUTO_ON."""
    enabled = (cfg or {}).get("enabled", False)
    return torch.device(device).type in AUTO_ON if enabled == "auto" else bool(enabled)


def compile_model(model: torch.nn.Module, cfg: Mapping[str, Any]) -> torch.nn.Module:
    """torch.compile(model) with compile.backend (default inductor) and compile.mode."""
    return torch.compile(model, backend=cfg.get("backend") or DEFAULT_BACKEND, mode=cfg.get("mode"))
