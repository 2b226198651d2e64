"""Muon for the hidden weight matrices and AdamW for everything else, as one optimizer: Lightning, the LR
schedule, gradient clipping and checkpoints all see a single object whose `param_groups` are both inner
optimizers' groups (the same dicts, so a schedule's lr change reaches them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from zoo.modules.attention import Attention
from zoo.modules.block import Stack
from zoo.modules.feedforward import FeedForward


def muon_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The 2-D weights of attention projections and FFN layers inside the layer stacks: what Muon
    orthogonalises. Embeddings, the output head, norms and biases stay with AdamW (as in the Muon papers)."""
    found = {id(p): p for module in model.modules() if isinstance(module, (Attention, FeedForward))
             for p in module.parameters() if p.requires_grad and p.dim() == 2}
    return list(found.values())


def muon_matrices(model: nn.Module) -> list[nn.Parameter]:
    """`muon_parameters`, or ValueError when there are none (Muon would get an empty parameter list): the
    model has no attention or feed-forward layers (bigram, mlp_lm), or finetune froze all of them."""
    hidden = muon_parameters(model)
    if hidden:
        return hidden
    config = getattr(model, "config", None)
    if any(isinstance(m, (Attention, FeedForward)) for m in model.modules()):
        why = "finetune freezes all of them"
    else:  # n_layers only where a layer stack reads it
        layers = (f", model.n_layers={config.n_layers}" if any(isinstance(m, Stack) for m in model.modules())
                  else "")
        why = f"this model has none (model.arch={getattr(config, 'arch', '?')}{layers})"
    raise ValueError("optim.name=muon trains the weight matrices of the attention and feed-forward layers of "
                     f"the stacks, and {why}; use optim.name=adamw")


class MuonWithAdamW(torch.optim.Optimizer):
    """`step` runs both inner optimizers; state_dict holds both (a resumed run continues exactly)."""

    def __init__(self, muon: torch.optim.Optimizer, adamw: torch.optim.Optimizer) -> None:
        self.inner = {"muon": muon, "adamw": adamw}
        self.defaults = {}
        self.state = {}  # per-parameter state lives in the inner optimizers
        self._optimizer_step_pre_hooks, self._optimizer_step_post_hooks = {}, {}
        self._optimizer_state_dict_pre_hooks, self._optimizer_state_dict_post_hooks = {}, {}
        self._optimizer_load_state_dict_pre_hooks, self._optimizer_load_state_dict_post_hooks = {}, {}

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [group for opt in self.inner.values() for group in opt.param_groups]

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for opt in self.inner.values():
            opt.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.inner.values():
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {name: opt.state_dict() for name, opt in self.inner.items()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name, opt in self.inner.items():
            opt.load_state_dict(state_dict[name])

    def __repr__(self) -> str:
        return f"MuonWithAdamW(muon={len(self.inner['muon'].param_groups[0]['params'])} matrices, " \
               f"adamw={sum(len(g['params']) for g in self.inner['adamw'].param_groups)} tensors)"
