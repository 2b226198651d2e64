"""Position-wise feed-forward network: Linear -> activation (optionally gated) -> Linear; and the registry of
FFN kinds (`model.ffn`: mlp, none, moe), each of which builds a layer's FFN sub-layer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from zoo.modules.clamped_glu import clamped_silu, clamped_swiglu
from zoo.registry import Registry


@dataclass(frozen=True)
class Activation:
    fn: Callable[[torch.Tensor], torch.Tensor]
    gated: bool  # gated variants (GLU family) split the up-projection into act(a) * b
    plain: str = ""  # gated only: the name of the ungated activation
                     # (what a non-FFN layer such as a head uses)
    glu: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None  # gated only: (gate, value) ->
    #                                           hidden, where it is not fn(gate) * value (swiglu_clamped)

    def combine(self, gate: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """A gated activation's hidden units from its gate and value halves."""
        return self.fn(gate) * value if self.glu is None else self.glu(gate, value)


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU's tanh approximation (GPT-2's gelu_new, Gemma's gelu_pytorch_tanh)."""
    return F.gelu(x, approximate="tanh")


ACTIVATIONS: Registry = Registry("activation")
ACTIVATIONS.register("relu", Activation(F.relu, gated=False))
ACTIVATIONS.register("gelu", Activation(F.gelu, gated=False))
ACTIVATIONS.register("gelu_tanh", Activation(_gelu_tanh, gated=False))
ACTIVATIONS.register("silu", Activation(F.silu, gated=False))
ACTIVATIONS.register("tanh", Activation(torch.tanh, gated=False))  # Bengio et al. 2003 (arch mlp_lm)
ACTIVATIONS.register("swiglu", Activation(F.silu, gated=True, plain="silu"))
ACTIVATIONS.register("geglu", Activation(F.gelu, gated=True, plain="gelu"))
ACTIVATIONS.register("geglu_tanh", Activation(_gelu_tanh, gated=True, plain="gelu_tanh"))  # Gemma
ACTIVATIONS.register("swiglu_clamped", Activation(clamped_silu, gated=True, plain="silu",  # gpt-oss experts
                                                  glu=clamped_swiglu))


def plain_activation(name: str) -> Activation:
    """The ungated form of activation `name` (swiglu -> silu); plain activations are themselves."""
    act = ACTIVATIONS.get(name)
    return ACTIVATIONS.get(act.plain) if act.gated else act


class FeedForward(nn.Module):
    """`down(act(up(x)))`; gated activations use `up` of width 2*d_ff as [gate | value]."""

    tap: Callable[[str, torch.Tensor], None] | None = None  # set only while tracing

    def __init__(self, cfg, d_ff: int | None = None) -> None:
        """`d_ff` overrides the config's hidden size (a Mixture-of-Experts' experts have their own)."""
        super().__init__()
        self.activation = ACTIVATIONS.get(cfg.activation)
        hidden = cfg.ffn_dim if d_ff is None else d_ff
        self.up = nn.Linear(cfg.d_model, hidden * (2 if self.activation.gated else 1), bias=cfg.bias)
        self.down = nn.Linear(hidden, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)  # (B, T, d_ff) or (B, T, 2*d_ff)
        if self.activation.gated:
            gate, value = h.chunk(2, dim=-1)
            h = self.activation.combine(gate, value)
        else:
            h = self.activation.fn(h)
        if self.tap is not None:
            self.tap("ffn_hidden", h)
        return self.down(h)


class FFNKind:
    """One `model.ffn` entry: builds layer `index`'s FFN sub-layer (None: the layer has none). Its keys are
    its settings class in zoo.modules.ffn_settings; `check_config` checks what they say with the rest."""

    def build(self, cfg, index: int) -> nn.Module | None:
        raise NotImplementedError

    def check_config(self, cfg) -> None:
        """Nothing to check beyond the spine's sizes (a kind with keys of its own overrides this)."""


class _Dense(FFNKind):
    def build(self, cfg, index: int) -> nn.Module | None:
        return FeedForward(cfg)


class _NoFFN(FFNKind):
    def build(self, cfg, index: int) -> nn.Module | None:
        return None


FFNS: Registry = Registry("ffn", key="model.ffn")  # names: zoo.modules.ffn_settings.FFN
FFNS.register("mlp", _Dense())
FFNS.register("none", _NoFFN())
