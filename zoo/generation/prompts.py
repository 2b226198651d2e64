"""Prompt batches: turning lists or tensors into (ids, attention_mask), moving padding to one side,
and position ids from the mask (the stepper crops a long prompt to a learned-position context)."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from torch.nn.utils.rnn import pad_sequence

PromptLike = torch.Tensor | Sequence[int] | Sequence[Sequence[int]]


def pad_prompts(prompts: Sequence[Sequence[int]], pad_id: int, *,
                side: str = "left") -> tuple[torch.Tensor, torch.Tensor]:
    """Lists of token ids of any lengths -> ids (B, T) and attention_mask (B, T), padded on `side`."""
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}.")
    if len(prompts) == 0:
        raise ValueError("No prompts given; pass at least one prompt of token ids.")
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"Prompt {i} is empty; every prompt needs at least one token.")
    ids = pad_sequence([torch.as_tensor(list(p), dtype=torch.long) for p in prompts], batch_first=True,
                       padding_value=pad_id, padding_side=side)
    mask = pad_sequence([torch.ones(len(p), dtype=torch.long) for p in prompts], batch_first=True,
                        padding_side=side)
    return ids, mask


def as_batch(
    input_ids: PromptLike, attention_mask: torch.Tensor | None, vocab_size: int, *, name: str = "input_ids"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate a prompt batch and return (ids (B, T) long, mask (B, T) long). A 1-D input is one prompt."""
    if not isinstance(input_ids, torch.Tensor):
        if len(input_ids) > 0 and not isinstance(input_ids[0], numbers.Integral):  # a list of prompts
            if attention_mask is not None:
                raise ValueError(f"attention_mask goes with a tensor {name}; "
                                 "lists of prompts are padded for you.")
            ids, mask = pad_prompts(input_ids, 0)
            return _check_range(ids, mask, vocab_size, name), mask
        input_ids = torch.as_tensor(list(input_ids), dtype=torch.long)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
        attention_mask = (attention_mask[None] if attention_mask is not None and attention_mask.dim() == 1
                          else attention_mask)
    if (input_ids.dim() != 2
            or input_ids.dtype not in (torch.long, torch.int, torch.int16, torch.int8, torch.uint8)):
        raise ValueError(f"{name} must be integer token ids of shape (batch, seq_len), got "
                         f"{tuple(input_ids.shape)} {input_ids.dtype}.")
    if input_ids.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(input_ids.shape)}); "
                         "give at least one token per prompt.")
    ids = input_ids.long()
    if attention_mask is None:
        mask = torch.ones_like(ids)
    else:
        if attention_mask.shape != ids.shape:
            raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} != {name} shape "
                             f"{tuple(ids.shape)}.")
        if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
            raise ValueError("attention_mask must hold only 0 (padding) and 1 (real token).")
        mask = attention_mask.long()
        empty = (mask.sum(-1) == 0).nonzero().flatten().tolist()
        if empty:
            raise ValueError(f"{name} rows {empty} have no real tokens "
                             "(attention_mask all 0); every prompt needs one.")
    return _check_range(ids, mask, vocab_size, name), mask


def _check_range(ids: torch.Tensor, mask: torch.Tensor, vocab_size: int, name: str) -> torch.Tensor:
    real = ids[mask.bool()]
    low, high = int(real.min()), int(real.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"{name} holds token ids in [{low}, {high}] "
                         f"but the vocabulary is [0, {vocab_size}).")
    return ids


def align(ids: torch.Tensor, mask: torch.Tensor, pad_id: int, *,
          side: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Move every row's padding to `side` keeping token order (a stable sort on the mask); pads get pad_id."""
    key = mask if side == "left" else 1 - mask  # pads sort first for left padding, last for right
    order = torch.sort(key, dim=-1, stable=True).indices  # (B, T)
    mask = mask.gather(-1, order)
    ids = ids.gather(-1, order).masked_fill(mask == 0, pad_id)
    return ids, mask


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """Position of each token among its row's real tokens (pads get 0): left padding keeps positions 0.."""
    return (mask.cumsum(-1) - 1).clamp(min=0)
