"""Compact, JSON-safe encodings of tensors for the page: base64 of little-endian float16 (logits,
positional patterns) or uint16 fixed point (attention weights in [0, 1]), with their shape."""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

UNIT_SCALE = 65535  # attention weights are stored as round(w * UNIT_SCALE): resolution 1.5e-5


def float16_header(shape: Sequence[int]) -> dict[str, Any]:
    return {"dtype": "f16", "shape": list(shape)}


def unit_header(shape: Sequence[int]) -> dict[str, Any]:
    return {"dtype": "u16", "scale": UNIT_SCALE, "shape": list(shape)}


def b64_chars(n_values: int) -> int:
    """Length of the base64 text of `n_values` 16-bit values (what a packed array adds beyond its header)."""
    return 4 * math.ceil(2 * n_values / 3)


def pack_float16(values: torch.Tensor) -> dict[str, Any]:
    """Any float tensor -> {"dtype": "f16", "shape", "b64"}; decoded in the page by `unpack`."""
    array = values.detach().float().cpu().numpy().astype("<f2")
    return {**float16_header(array.shape), "b64": base64.b64encode(array.tobytes()).decode("ascii")}


def pack_unit(values: torch.Tensor) -> dict[str, Any]:
    """Values in [0, 1] (attention weights) -> uint16 fixed point; the page divides by `scale`."""
    array = (values.detach().float().clamp(0, 1).cpu().numpy() * UNIT_SCALE).round().astype("<u2")
    return {**unit_header(array.shape), "b64": base64.b64encode(array.tobytes()).decode("ascii")}


def unpack(packed: dict[str, Any]) -> np.ndarray:
    """Inverse of the pack functions (the page does the same in JS); used by tests and by Python readers."""
    raw = base64.b64decode(packed["b64"])
    if packed["dtype"] == "f16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float32).reshape(packed["shape"])
    if packed["dtype"] == "u16":
        return (np.frombuffer(raw, dtype="<u2").astype(np.float32) / packed["scale"]).reshape(packed["shape"])
    raise ValueError(f"unknown packed dtype {packed['dtype']!r}; known: f16, u16.")


def downsample(matrix: torch.Tensor, max_rows: int, max_cols: int) -> torch.Tensor:
    """Keep evenly spaced rows / columns so a picture stays within max_rows x max_cols cells."""
    rows = torch.linspace(0, matrix.shape[0] - 1, min(max_rows, matrix.shape[0])).round().long()
    cols = torch.linspace(0, matrix.shape[1] - 1, min(max_cols, matrix.shape[1])).round().long()
    return matrix[rows][:, cols]
