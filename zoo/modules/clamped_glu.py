"""gpt-oss's expert activation (`activation: swiglu_clamped`): a SwiGLU whose gate is clamped from above and
whose value is clamped on both sides at `LIMIT`, the gate's SiLU sharpened by `ALPHA`, the value shifted by 1:

    g = min(gate, LIMIT),  u = clamp(value, -LIMIT, LIMIT),  out = (u + 1) * g * sigmoid(ALPHA * g)

The constants are gpt-oss's (config.json `swiglu_alpha`, `swiglu_limit`); the pretrained family refuses
others."""

from __future__ import annotations

import torch

ALPHA, LIMIT = 1.702, 7.0


def clamped_swiglu(gate: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """(..., F) gate and value halves -> (..., F)."""
    gate = gate.clamp(max=LIMIT)
    value = value.clamp(-LIMIT, LIMIT)
    return (value + 1) * gate * torch.sigmoid(ALPHA * gate)


def clamped_silu(x: torch.Tensor) -> torch.Tensor:
    """The gate's own nonlinearity, min(x, LIMIT) * sigmoid(ALPHA * min(x, LIMIT)) (the value taken as 0)."""
    return clamped_swiglu(x, torch.zeros_like(x))
