"""Residual wiring, chosen by `norm_placement` through WIRINGS: how a block wraps each of its sub-layers
f (self-attention, cross-attention, FFN) with norms, dropout and the residual add.

- pre (GPT-2, Llama):      x = x + f(norm(x))
- post (Vaswani, BERT):    x = norm(x + f(x))
- sandwich (Gemma 2):      x = x + post_norm(f(norm(x)))
- post_sublayer (OLMo 2):  x = x + post_norm(f(x))   (the norm inside the residual branch, on its output)
- parallel (GPT-NeoX):      x = x + f1(norm1(x)) + f2(norm2(x)) + ...   (every sub-layer reads the same x)
- parallel_shared (GPT-J, Phi-2): x = x + f1(norm(x)) + f2(norm(x)) + ...   (one norm for all sub-layers)

A wiring creates the norms it needs on the block (`norm_<sub>`, and `post_norm_<sub>` for sandwich, so
state-dict and trace names stay stable) and says whether the stack ends in a final norm by default. Where each
sub-layer reads its input through its own norm (pre, sandwich, parallel), `model.first_attn_norm=false` makes
layer 0's attention norm the identity (ModernBERT: the embedding norm right before it does that job)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from zoo.modules.norm import make_norm
from zoo.registry import Registry

WIRINGS: Registry = Registry("norm_placement")
SubLayer = tuple[str, Callable[[torch.Tensor], torch.Tensor]]  # (name, f: (B, T, C) -> (B, T, C))


class Wiring:
    """Base: one norm per sub-layer on its input (pre-norm), applied in sequence."""

    final_norm = True  # default of model.final_norm: a stack whose output is not normalised needs one
    input_norms = True  # each sub-layer reads its input through a norm of its own (`norm_<sub>`)

    @classmethod
    def check_config(cls, cfg) -> None:
        """model.first_attn_norm=false needs an input norm of layer 0's own mixer to drop (layer 0's wiring:
        a hybrid's linear layers may have their own, model.linear_mixer.norm_placement)."""
        placement = cfg.layer_norm_placement(0)
        if not cfg.first_attn_norm and not WIRINGS.get(placement).input_norms:
            own = placement != cfg.norm_placement  # layer 0 runs the linear mixer with a wiring of its own
            key = "model.linear_mixer.norm_placement" if own else "model.norm_placement"
            keeps = [n for n in WIRINGS.names() if WIRINGS.get(n).input_norms]
            raise ValueError(f"model.first_attn_norm=false drops layer 0's attention input norm, but "
                             f"{key}={placement!r} has no input norm of the attention alone; it applies "
                             f"to norm_placement {' | '.join(keeps)}.")

    def without_input_norm(self, block: nn.Module, name: str) -> None:
        """Sub-layer `name` of `block` reads its input unnormalised (model.first_attn_norm=false, layer 0)."""
        setattr(block, f"norm_{name}", nn.Identity())

    def add_norms(self, block: nn.Module, name: str, cfg) -> None:
        """Create the norms sub-layer `name` needs as attributes of `block`."""
        setattr(block, f"norm_{name}", make_norm(cfg))

    def norm(self, block: nn.Module, name: str) -> nn.Module:
        return getattr(block, f"norm_{name}")

    def run(self, block: nn.Module, x: torch.Tensor, sublayers: Sequence[SubLayer]) -> torch.Tensor:
        for name, f in sublayers:
            x = self.step(block, x, name, f)
        return x

    def step(self, block: nn.Module, x: torch.Tensor, name: str, f) -> torch.Tensor:
        return residual_add(block, x, block.drop(f(self.norm(block, name)(x))))


def residual_add(block: nn.Module, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """x + h, or h alone for a block built with model.residual=false; h first times the block's
    `branch_scale` (model.depth_scale / sqrt(its stack's depth): MiniCPM) where it has one."""
    scale = getattr(block, "branch_scale", 1.0)
    if scale != 1.0:
        h = h * scale
    return x + h if block.residual else h


@WIRINGS.register("pre")
class PreNorm(Wiring):
    """x + f(norm(x)): the residual stream is never normalised, so the stack ends with a final norm."""


@WIRINGS.register("post")
class PostNorm(Wiring):
    """norm(x + f(x)): every sub-layer already ends in a norm, so no final norm by default."""

    final_norm = False
    input_norms = False  # the norm is after the add

    def step(self, block: nn.Module, x: torch.Tensor, name: str, f) -> torch.Tensor:
        return self.norm(block, name)(residual_add(block, x, block.drop(f(x))))


@WIRINGS.register("sandwich")
class SandwichNorm(Wiring):
    """x + post_norm(f(norm(x))): a second norm on each sub-layer's output before the add (Gemma 2)."""

    def add_norms(self, block: nn.Module, name: str, cfg) -> None:
        super().add_norms(block, name, cfg)
        setattr(block, f"post_norm_{name}", make_norm(cfg))

    def step(self, block: nn.Module, x: torch.Tensor, name: str, f) -> torch.Tensor:
        h = getattr(block, f"post_norm_{name}")(f(self.norm(block, name)(x)))
        return residual_add(block, x, block.drop(h))


@WIRINGS.register("post_sublayer")
class PostSublayerNorm(Wiring):
    """x + post_norm(f(x)): each sub-layer's output is normalised before the add, its input is not (OLMo 2);
    the stream is never normalised, so the stack ends with a final norm."""

    input_norms = False

    def add_norms(self, block: nn.Module, name: str, cfg) -> None:
        setattr(block, f"post_norm_{name}", make_norm(cfg))

    def step(self, block: nn.Module, x: torch.Tensor, name: str, f) -> torch.Tensor:
        return residual_add(block, x, block.drop(getattr(block, f"post_norm_{name}")(f(x))))


@WIRINGS.register("parallel")
class ParallelNorm(Wiring):
    """x + sum_i f_i(norm_i(x)): sub-layers read the same input and their outputs are summed (GPT-NeoX)."""

    def run(self, block: nn.Module, x: torch.Tensor, sublayers: Sequence[SubLayer]) -> torch.Tensor:
        total = sum(block.drop(f(self.norm(block, name)(x))) for name, f in sublayers)
        return residual_add(block, x, total)


@WIRINGS.register("parallel_shared")
class SharedParallelNorm(Wiring):
    """x + sum_i f_i(norm(x)): parallel sub-layers behind one norm (`norm_self`), as GPT-J and Phi-2 have."""

    input_norms = False  # one norm shared by every sub-layer, not the attention's own

    def add_norms(self, block: nn.Module, name: str, cfg) -> None:
        if name == "self":  # the first sub-layer's norm serves them all
            super().add_norms(block, name, cfg)

    def run(self, block: nn.Module, x: torch.Tensor, sublayers: Sequence[SubLayer]) -> torch.Tensor:
        h = block.norm_self(x)
        return residual_add(block, x, sum(block.drop(f(h)) for _, f in sublayers))


def uses_final_norm(cfg) -> bool:
    """model.final_norm if given, else the wiring's default."""
    return WIRINGS.get(cfg.norm_placement).final_norm if cfg.final_norm is None else cfg.final_norm
