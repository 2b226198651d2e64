"""Shared helpers for the pretrained tests: tiny HF models with every weight perturbed (so biases and norm
gains matter), saved locally. Nothing is downloaded."""

from __future__ import annotations

import torch


def perturbed(model: torch.nn.Module, seed: int = 0, scale: float = 0.05) -> torch.nn.Module:
    """Add N(0, scale) noise to every parameter: HF inits biases to 0 and norm gains to 1, which would
    hide a swapped bias or gain."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if not p.requires_grad:  # fixed tables (Marian's sinusoids) are recomputed on load, not stored
                continue
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return model.eval()


def saved(model, tmp_path, name: str = "hf"):
    path = tmp_path / name
    model.save_pretrained(path)
    return path


def right_padded(batch: int, length: int, vocab: int, lengths: list[int], seed: int = 0, low: int = 3):
    """Random ids (B, T) and an attention mask with zeros after each row's length."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(low, vocab, (batch, length), generator=gen)
    mask = (torch.arange(length)[None] < torch.tensor(lengths)[:, None]).long()
    return ids, mask
