"""Sequence classification: an encoder or a decoder with a classifier head labels whole texts (an encoder
pools its first token, a decoder its last real one: zoo.modules.heads); the label count comes from the data.
Batches are right-padded with an attention mask, which the decoder's pooling reads. Validation reports
accuracy; samples show predicted and true labels."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torchmetrics import Metric

from zoo.config import ModelConfig
from zoo.data.datamodules import ClassificationDataModule
from zoo.evaluation.loop import EvalOptions, forward_batches
from zoo.evaluation.metrics import TokenNLL, accuracy, macro_f1
from zoo.tasks.base import Task, register
from zoo.training.samples import Sample, SampleReport

SHOWN_CHARS = 200  # characters of each sample text printed


class Accuracy(Metric):
    """Fraction of examples whose arg-max class is the label, over all batches (and processes)."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("correct", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, out, batch: Mapping[str, torch.Tensor]) -> None:
        labels = batch["labels"]  # (B,)
        self.correct += (out.logits.argmax(-1) == labels).sum()  # logits (B, num_labels)
        self.total += labels.numel()

    def compute(self) -> torch.Tensor:
        return self.correct / self.total


@register
class Classification(Task):
    name = "classification"
    archs = ("encoder", "decoder")
    head = "classifier"
    user_data = "data=classification data.path=..."
    corpus_kind = "labelled"
    perplexity = False
    needed_specials = (("cls", "bos"),)  # the first token, which an encoder's classifier pools

    def check_model(self, cfg: ModelConfig) -> None:
        """model.num_labels may still be 0: the data gives it (model_config); the rest is checked now."""
        super().check_model(dataclasses.replace(cfg, num_labels=cfg.num_labels or 1))

    def model_config(self, cfg: ModelConfig, tokenizer) -> ModelConfig:
        """num_labels from the data's label names; a num_labels the user set must match them."""
        found = len(tokenizer.label_names)
        if cfg.num_labels and cfg.num_labels != found:
            raise ValueError(f"model.num_labels={cfg.num_labels} but the data has {found} labels; "
                             "leave model.num_labels unset (the data sets it)")
        return super().model_config(cfg, tokenizer)

    def datamodule(self, entry, loader: Mapping[str, Any], **common: Any) -> ClassificationDataModule:
        examples = {s: (entry.arrays[f"{s}.text"], entry.arrays[f"{s}.labels"]) for s in ("train", "val")}
        return ClassificationDataModule(entry.tokenizer, examples, label_names=entry.tokenizer.label_names, **common)

    def counted_labels(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """One label per example: labels are (B,)."""
        labels = batch["labels"]
        return torch.tensor(labels.shape[0], device=labels.device)

    def val_metrics(self, label_names: Sequence[str] = ()) -> dict[str, Metric]:
        return {"accuracy": Accuracy()}

    def evaluate(self, model, tokenizer, datamodule, split: str, options: EvalOptions) -> dict[str, float]:
        """Accuracy and macro-F1 (every class of the model weighs the same) of the arg-max labels, and the
        mean cross-entropy."""
        nll, predicted, labels = TokenNLL(), [], []
        for batch, out in forward_batches(self, model, datamodule, split, options.max_examples):
            nll.add(self.loss(out, batch), self.counted_labels(batch))  # the model's cross-entropy
            predicted += out.logits.argmax(-1).tolist()  # logits (B, num_labels)
            labels += batch["labels"].tolist()
        return {"loss": nll.loss, "accuracy": accuracy(predicted, labels),
                "macro_f1": macro_f1(predicted, labels, model.config.num_labels), "examples": len(labels)}

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        """Predicted and true label of the first validation examples."""
        batch = next(iter(datamodule.val_dataloader()))
        names = tokenizer.label_names or []
        device = next(model.parameters()).device
        with torch.inference_mode():
            logits = model(batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)).logits

        def label(i: int) -> str:
            return names[i] if i < len(names) else str(i)

        samples = [
            Sample(tokenizer.decode(batch["input_ids"][i])[:SHOWN_CHARS], label(p), label(int(y)))
            for i, (p, y) in enumerate(zip(logits.argmax(-1).tolist(), batch["labels"].tolist(), strict=True))
        ][: cfg["num_shown"]]
        return SampleReport(samples, {})
