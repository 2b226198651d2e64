"""Shared helpers for the pretrained tests: tiny HF models with every weight perturbed (so biases and norm
gains matter), saved locally. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import torch

import zoo


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


def export_round_trip(model: torch.nn.Module, hf_class: type, path: Path) -> tuple[Path, torch.nn.Module]:
    """zoo.save_pretrained, then zoo reads the folder back with the same config and bit-identical weights
    (same names, same order). Returns the folder and `hf_class` loaded from it, for the family's own
    logits check against `transformers`."""
    out = zoo.save_pretrained(model, path)
    again = zoo.from_pretrained(out)
    assert again.config == model.config
    mine, theirs = model.state_dict(), again.state_dict()
    assert list(mine) == list(theirs)
    for name, tensor in mine.items():
        assert torch.equal(tensor, theirs[name]), name
    return out, hf_class.from_pretrained(out).eval()
