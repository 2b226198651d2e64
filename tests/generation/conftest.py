"""Tiny models and direct-forward references shared by the decoding tests."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.generation.prompts import position_ids
from zoo.modules.positional import POSITIONALS as _REGISTRY
from zoo.modules.positional import Positional

POSITIONED = [n for n in _REGISTRY.names() if _REGISTRY.get(n) is not Positional]  # all but "none"

POSITIONALS = _REGISTRY.names()  # every registered scheme
VOCAB = 50


def tiny_decoder(positional: str = "learned", **overrides):
    torch.manual_seed(0)
    cfg = dict(arch="decoder", vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, positional=positional,
               max_seq_len=12, dropout=0.0)
    cfg.update(overrides)
    return zoo.build(cfg).eval()


def tiny_seq2seq(positional: str = "sinusoidal", **overrides):
    torch.manual_seed(0)
    cfg = dict(arch="encoder_decoder", vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4,
               positional=positional, max_seq_len=16, dropout=0.0)
    cfg.update(overrides)
    return zoo.build(cfg).eval()


@torch.no_grad()
def reference_next_logits(model, seq: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Next-token logits (B, V) from one plain forward (no cache) over the whole left-padded sequence;
    learned positions see only the last max_seq_len columns (the classic crop)."""
    if model.config.positional.name == "learned":
        seq, mask = seq[:, -model.config.max_seq_len :], mask[:, -model.config.max_seq_len :]
    return model(seq, attention_mask=mask, position_ids=position_ids(mask)).logits[:, -1].float()


@torch.no_grad()
def naive_greedy(model, prompt: list[int], steps: int) -> list[int]:
    """Textbook greedy loop for one unpadded prompt: rerun the (cropped) sequence, take the argmax."""
    seq = torch.tensor([prompt])
    for _ in range(steps):
        logits = reference_next_logits(model, seq, torch.ones_like(seq))
        seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)
    return seq[0].tolist()


@pytest.fixture(params=POSITIONALS)
def positional(request) -> str:
    return request.param
