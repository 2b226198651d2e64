"""Memory levers for training bigger models.

- Activation checkpointing per block: a stack keeps only each layer's input during the forward pass and
  recomputes the layer's activations during backward (`set_activation_checkpointing(model, True)`).
- Chunked cross-entropy: the loss of hidden states against targets, projected to the vocabulary a chunk of
  positions at a time and recomputed chunk by chunk in backward, so no (B, T, V) logits tensor (nor its
  fp32 copy or gradient) ever exists (`chunked_cross_entropy`).
Both give the same loss and gradients as the plain computation (tests/modules/test_checkpointing.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from zoo.modules.block import Stack
from zoo.utils import IGNORE_INDEX


def set_activation_checkpointing(model: nn.Module, enabled: bool = True) -> int:
    """Switch activation checkpointing on (or off) for every layer stack in `model`; returns the number of
    stacks switched. It applies in training with gradients on and no KV cache; inference is unchanged."""
    stacks = [m for m in model.modules() if isinstance(m, Stack)]
    for stack in stacks:
        stack.checkpoint_layers = bool(enabled)
    return len(stacks)


def _chunk_nll_sum(head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, targets: torch.Tensor,
                   ignore_index: int) -> torch.Tensor:
    logits = head(hidden).float()  # (n, V): one chunk only
    return F.cross_entropy(logits, targets, ignore_index=ignore_index, reduction="sum")


def chunked_cross_entropy(
    hidden: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor], targets: torch.Tensor,
    chunk_size: int, *, ignore_index: int = IGNORE_INDEX,
) -> torch.Tensor:
    """Mean cross-entropy of `head(hidden)` against `targets` over the positions whose target is not
    `ignore_index` (0 when there are none), computed `chunk_size` positions at a time.

    hidden (..., C) and targets (...) are flattened to N positions; each chunk's logits (chunk_size, V) are
    made, reduced to a summed NLL and dropped; with gradients on, each chunk is recomputed in backward
    (torch.utils.checkpoint), so the peak holds one chunk's logits, never N x V."""
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} and targets {tuple(targets.shape)} must agree on all "
                         "but hidden's last (feature) dimension")
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])  # (N, C)
    flat_targets = targets.reshape(-1)  # (N,)
    recompute = torch.is_grad_enabled() and flat_hidden.requires_grad
    total = flat_hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, flat_targets.numel(), chunk_size):
        h, t = flat_hidden[start:start + chunk_size], flat_targets[start:start + chunk_size]
        if recompute:
            total = total + checkpoint(_chunk_nll_sum, head, h, t, ignore_index, use_reentrant=False)
        else:
            total = total + _chunk_nll_sum(head, h, t, ignore_index)
    return total / (flat_targets != ignore_index).sum().clamp(min=1)
