"""Sequence classification: an encoder or a decoder with a classifier head labels whole texts (an encoder
pools its first token, a decoder its last real one: zoo.modules.heads); the label count comes from the data.
Batches are right-padded with an attention mask, which the decoder's pooling reads. Validation reports
accuracy; samples show predicted and true labels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torchmetrics import Metric

from zoo.data.datamodules import ClassificationDataModule
from zoo.tasks.base import LabelledTask, register
from zoo.tasks.evaluating import EvalOptions, first_val_logits, forward_batches
from zoo.tasks.metrics import Accuracy, TokenNLL, accuracy, macro_f1
from zoo.tasks.samples import Sample, SampleReport

SHOWN_CHARS = 200  # characters of each sample text printed


@register
class Classification(LabelledTask):
    name = "classification"
    archs = ("encoder", "decoder")
    head = "classifier"
    user_data = "data=classification data.path=..."
    corpus_kind = "labelled"
    perplexity = False
    needed_specials = (("cls", "bos"),)  # the first token, which an encoder's classifier pools

    def datamodule(self, entry, loader: Mapping[str, Any], **common: Any) -> ClassificationDataModule:
        examples = {s: (entry.arrays[f"{s}.text"], entry.arrays[f"{s}.labels"]) for s in ("train", "val")}
        return ClassificationDataModule(entry.tokenizer, examples, label_names=entry.tokenizer.label_names,
                                        **common)

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
                "macro_f1": macro_f1(predicted, labels, model.config.head.num_labels),
                "examples": len(labels)}

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        """Predicted and true label of the first validation examples."""
        batch, logits = first_val_logits(model, datamodule)  # logits (B, num_labels)
        names = tokenizer.label_names or []

        def label(i: int) -> str:
            return names[i] if i < len(names) else str(i)

        samples = [
            Sample(tokenizer.decode(batch["input_ids"][i])[:SHOWN_CHARS], label(p), label(int(y)))
            for i, (p, y) in enumerate(zip(logits.argmax(-1).tolist(), batch["labels"].tolist(), strict=True))
        ][: cfg["num_shown"]]
        return SampleReport(samples, {})
