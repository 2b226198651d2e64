"""Causal language modelling: a decoder predicts each next token of text windows; samples continue
the configured prompts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.data.datamodules import LMDataModule
from zoo.tasks.base import StreamTask, register
from zoo.training.samples import Sample, SampleReport
from zoo.utils import IGNORE_INDEX


@register
class LanguageModelling(StreamTask):
    name = "lm"
    archs = ("decoder",)
    builtin_data = "stdlib_text"

    def datamodule(self, entry, loader: Mapping[str, Any], **common: Any) -> LMDataModule:
        return LMDataModule(entry.tokenizer, self.streams(entry), blocks_per_epoch=loader.get("blocks_per_epoch"),
                            **common)

    def counted_labels(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Position t predicts token t+1: the first label of each row is never a target."""
        return (batch["labels"][:, 1:] != IGNORE_INDEX).sum()

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        """Sampled continuations of `cfg["prompts"]` (seeded per prompt)."""
        samples = []
        for i, prompt in enumerate(cfg["prompts"]):
            ids = tokenizer.encode(prompt) or [tokenizer.eos_id]
            seq = model.generate(
                [ids], max_new_tokens=cfg["max_new_tokens"], do_sample=True, temperature=cfg["temperature"],
                top_k=cfg["top_k"], seed=cfg["seed"] + i, eos_token_id=[],
            )[0]
            samples.append(Sample(prompt, tokenizer.decode(seq[len(ids):] if len(seq) > len(ids) else seq)))
        return SampleReport(samples, {})
