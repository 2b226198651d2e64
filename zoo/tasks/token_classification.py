"""Token classification (NER): a token_classifier head tags every token; each word's tag sits on its first
sub-token (zoo.data.tagging). Validation logs the word-level tag accuracy (every validation sentence) and
entity-level precision / recall / F1 as seqeval computes them (the exact_match callback's first
`max_examples` sentences); evaluate.py reports all four over the split, with the loss."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any

import torch
from torchmetrics import Metric

from zoo.config import ModelConfig
from zoo.data.tagging import TokenClassificationDataModule
from zoo.evaluation.loop import EvalOptions, forward_batches
from zoo.evaluation.metrics import TokenNLL, entity_scores
from zoo.tasks.base import Task, register
from zoo.training.samples import Sample, SampleReport
from zoo.utils import IGNORE_INDEX

SHOWN_CHARS = 200  # characters of each sample sentence printed


class TagAccuracy(Metric):
    """Fraction of labelled positions (each word's first sub-token) whose arg-max tag is the label."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("correct", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, out, batch: Mapping[str, torch.Tensor]) -> None:
        labels = batch["labels"]  # (B, T)
        counted = labels != IGNORE_INDEX
        self.correct += ((out.logits.argmax(-1) == labels) & counted).sum()  # logits (B, T, num_labels)
        self.total += counted.sum()

    def compute(self) -> torch.Tensor:
        return self.correct / self.total


def _entity(name: str):
    """reference_metrics entry: seqeval's `name` of predicted tag sequences against the gold ones."""
    return lambda predicted, gold: entity_scores(gold, predicted)[name]


@register
class TokenClassification(Task):
    name = "token_classification"
    archs = ("encoder", "decoder")
    head = "token_classifier"
    user_data = "data=token_tags data.path=..."
    corpus_kind = "tagged"
    perplexity = False
    has_references = True  # the gold tag sequences: the exact_match callback logs val/precision, recall, f1
    reference_metrics = types.MappingProxyType({name: _entity(name) for name in ("precision", "recall", "f1")})

    def check_model(self, cfg: ModelConfig) -> None:
        """model.num_labels may still be 0: the data gives it (model_config); the rest is checked now."""
        super().check_model(dataclasses.replace(cfg, num_labels=cfg.num_labels or 1))

    def model_config(self, cfg: ModelConfig, tokenizer) -> ModelConfig:
        """num_labels from the data's tag names; a num_labels the user set must match them."""
        found = len(tokenizer.label_names)
        if cfg.num_labels and cfg.num_labels != found:
            raise ValueError(f"model.num_labels={cfg.num_labels} but the data has {found} tags "
                             f"{tokenizer.label_names}; leave model.num_labels unset (the data sets it)")
        return super().model_config(cfg, tokenizer)

    def datamodule(self, entry, loader: Mapping[str, Any], **common: Any) -> TokenClassificationDataModule:
        examples = {s: (entry.arrays[f"{s}.ids"], entry.arrays[f"{s}.labels"]) for s in ("train", "val")}
        return TokenClassificationDataModule(entry.tokenizer, examples, label_names=entry.tokenizer.label_names,
                                             **common)

    def val_metrics(self) -> dict[str, Metric]:
        return {"accuracy": TagAccuracy()}

    # ------------------------------------------------------------------------------- outputs
    def tag_sequences(self, model, datamodule, split: str, max_examples: int | None
                      ) -> tuple[list[list[str]], list[list[str]], list[torch.Tensor], TokenNLL]:
        """(gold tags, predicted tags, input ids) of each sentence of `split` in loader order (the tags at
        its labelled positions) and the loss totals, over the first `max_examples` sentences."""
        names = datamodule.label_names
        gold, predicted, inputs, nll = [], [], [], TokenNLL()
        for batch, out in forward_batches(self, model, datamodule, split, max_examples):
            nll.add(self.loss(out, batch), self.counted_labels(batch))
            guesses = out.logits.argmax(-1)  # (B, T)
            for ids, mask, labels, guess in zip(batch["input_ids"], batch["attention_mask"], batch["labels"],
                                                guesses, strict=True):
                counted = labels != IGNORE_INDEX
                gold.append([names[i] for i in labels[counted].tolist()])
                predicted.append([names[i] for i in guess[counted].tolist()])
                inputs.append(ids[mask.bool()].cpu())
        return gold, predicted, inputs, nll

    def references(self, model, tokenizer, datamodule, n: int) -> tuple[list[list[str]], list[list[str]]]:
        """Predicted and gold tag sequences of the first `n` validation sentences."""
        gold, predicted, _, _ = self.tag_sequences(model, datamodule, "val", n)
        return predicted, gold

    def evaluate(self, model, tokenizer, datamodule, split: str, options: EvalOptions) -> dict[str, float]:
        """Entity-level precision, recall and F1 (seqeval, default mode), word-level tag accuracy and the
        mean cross-entropy per labelled token."""
        gold, predicted, _, nll = self.tag_sequences(model, datamodule, split, options.max_examples)
        return {"loss": nll.loss, **entity_scores(gold, predicted), "examples": len(gold), "words": nll.tokens}

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        """Predicted and gold tags of the first validation sentences."""
        gold, predicted, inputs, _ = self.tag_sequences(model, datamodule, "val", cfg["num_shown"])
        return SampleReport([Sample(tokenizer.decode(ids)[:SHOWN_CHARS], " ".join(p), " ".join(g))
                             for ids, p, g in zip(inputs, predicted, gold, strict=True)], {})
