"""The weights a config asks for, bounded from below by its sizes alone, and refused before anything is
allocated when they cannot fit in this machine's memory (`model.n_layers=10000000000` was built layer by layer
until the process ran out of memory). Building on the meta device (counting, inspecting, a large model's
load) allocates nothing and is never refused."""

from __future__ import annotations

import os

import torch

from zoo.config import ModelConfig
from zoo.models.vocabulary import ARCHS


def physical_memory() -> int | None:
    """Bytes of RAM on this machine (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _size(n: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} bytes"


def check_fits(cfg: ModelConfig) -> None:
    """ValueError naming the sizes when the least weights `cfg` builds (its arch answers: depth and
    least_parameters), in the default dtype, exceed this machine's memory. Skipped on the meta device."""
    if torch.get_default_device().type == "meta":
        return
    memory = physical_memory()
    arch = ARCHS.get(cfg.arch)
    need = arch.least_parameters(cfg) * torch.get_default_dtype().itemsize
    if memory is None or need <= memory:
        return
    depth = arch.depth(cfg)[1] or "(no blocks)"
    raise ValueError(
        f"model sizes {depth}, model.d_model={cfg.d_model}, model.n_heads={cfg.n_heads} (head size "
        f"{cfg.head_size}), model.vocab_size={cfg.vocab_size} need at least {_size(need)} of "
        f"{torch.get_default_dtype()} weights, more than this machine's {_size(memory)} of memory; choose "
        "smaller sizes (or build under `with torch.device('meta'):` to count or inspect it without weights).")
