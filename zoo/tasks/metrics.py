"""Validation metrics shared by tasks (torchmetrics: states summed over batches and processes)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torchmetrics import Metric

from zoo.utils import IGNORE_INDEX


class Accuracy(Metric):
    """Fraction of labelled positions whose arg-max is the label: one per example (classification: labels
    (B,), logits (B, num_labels)) or one per tagged token (labels (B, T) with -100 where none, logits
    (B, T, num_labels))."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("correct", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, out, batch: Mapping[str, torch.Tensor]) -> None:
        labels = batch["labels"]
        counted = labels != IGNORE_INDEX
        self.correct += ((out.logits.argmax(-1) == labels) & counted).sum()
        self.total += counted.sum()

    def compute(self) -> torch.Tensor:
        return self.correct / self.total
