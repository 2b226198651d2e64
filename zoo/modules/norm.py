"""Normalisation layers, chosen by name through NORMS."""

from __future__ import annotations

import torch
from torch import nn

from zoo.registry import Registry

NORMS: Registry = Registry("norm")


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 (as Llama does) and cast back."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class OnePlusRMSNorm(nn.Module):
    """x / rms(x) * (1 + weight) with the weight starting at zero (Gemma): the gain is 1 at init, weight
    decay pulls it towards 1 rather than 0. Unlike RMSNorm the gain is applied in float32, then cast back."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).to(x.dtype)


NORMS.register("layernorm", lambda dim, eps, bias: nn.LayerNorm(dim, eps=eps, bias=bias))
NORMS.register("rmsnorm", lambda dim, eps, bias: RMSNorm(dim, eps=eps))
NORMS.register("rmsnorm_1p", lambda dim, eps, bias: OnePlusRMSNorm(dim, eps=eps))
NORMS.register("none", lambda dim, eps, bias: nn.Identity())


def norm_module_types() -> tuple[type, ...]:
    """The module classes the registry builds that normalise (Identity excluded): what tracing and the
    parameter counts recognise as a norm."""
    built = {type(NORMS.get(n)(2, 1e-5, True)) for n in NORMS.names()}
    return tuple(sorted(built - {nn.Identity}, key=lambda t: t.__name__))


def make_norm(cfg, dim: int | None = None) -> nn.Module:
    """The configured norm over `dim` (default d_model)."""
    return NORMS.get(cfg.norm)(dim or cfg.d_model, cfg.norm_eps, cfg.bias)
