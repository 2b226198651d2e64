"""Token classification (NER): a token_classifier head tags every token; each word's tag sits on its first
sub-token (zoo.data.tagging). Validation logs the word-level tag accuracy and entity-level precision /
recall / F1 as seqeval computes them, over every validation sentence (and process); evaluate.py reports the
same four over the split, with the loss."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from zoo.data.tagging import TokenClassificationDataModule
from zoo.tasks.base import LabelledTask, register
from zoo.tasks.evaluating import EvalOptions, forward_batches
from zoo.tasks.metrics import Accuracy, TokenNLL, entity_scores
from zoo.tasks.samples import Sample, SampleReport
from zoo.utils import IGNORE_INDEX

SHOWN_CHARS = 200  # characters of each sample sentence printed


class EntityScore(Metric):
    """seqeval's entity-level `score` (precision | recall | f1, `entity_scores`) of the predicted tag
    sequences against the gold ones: each sentence's tags at its labelled positions are kept (tag ids,
    gathered from every process) and named by `label_names` once, at the end of the validation."""

    full_state_update = False

    def __init__(self, label_names: Sequence[str], score: str) -> None:
        super().__init__()
        self.label_names, self.score = list(label_names), score
        self.add_state("gold", default=[], dist_reduce_fx="cat")  # tag ids of every labelled position
        self.add_state("predicted", default=[], dist_reduce_fx="cat")
        self.add_state("lengths", default=[], dist_reduce_fx="cat")  # labelled positions per sentence

    def update(self, out, batch: Mapping[str, torch.Tensor]) -> None:
        labels = batch["labels"]  # (B, T)
        counted = labels != IGNORE_INDEX
        self.gold.append(labels[counted])  # row by row: each sentence's positions stay together
        self.predicted.append(out.logits.argmax(-1)[counted])  # logits (B, T, num_labels)
        self.lengths.append(counted.sum(-1))

    def compute(self) -> torch.Tensor:
        if not self.label_names:
            raise ValueError(f"val/{self.score} names the tags by the data's label names; none were given")
        if not self.lengths:  # no validation sentence: no entity, which seqeval scores 0
            return torch.tensor(0.0, device=self.device)
        lengths = dim_zero_cat(self.lengths).tolist()
        gold, predicted = (dim_zero_cat(s).split(lengths) for s in (self.gold, self.predicted))
        names = self.label_names
        scores = entity_scores([[names[i] for i in s.tolist()] for s in gold],
                               [[names[i] for i in s.tolist()] for s in predicted])
        return torch.tensor(scores[self.score], device=self.device)


@register
class TokenClassification(LabelledTask):
    name = "token_classification"
    archs = ("encoder", "decoder")
    head = "token_classifier"
    user_data = "data=token_tags data.path=..."
    corpus_kind = "tagged"
    perplexity = False
    label_kind = "tags"

    def datamodule(self, entry, loader: Mapping[str, Any], **common: Any) -> TokenClassificationDataModule:
        examples = {s: (entry.arrays[f"{s}.ids"], entry.arrays[f"{s}.labels"]) for s in ("train", "val")}
        return TokenClassificationDataModule(entry.tokenizer, examples,
                                             label_names=entry.tokenizer.label_names, **common)

    def val_metrics(self, label_names: Sequence[str] = ()) -> dict[str, Metric]:
        entities = {s: EntityScore(label_names, s) for s in ("precision", "recall", "f1")}
        return {"accuracy": Accuracy(), **entities}

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

    def evaluate(self, model, tokenizer, datamodule, split: str, options: EvalOptions) -> dict[str, float]:
        """Entity-level precision, recall and F1 (seqeval, default mode), word-level tag accuracy and the
        mean cross-entropy per labelled token."""
        gold, predicted, _, nll = self.tag_sequences(model, datamodule, split, options.max_examples)
        scores = entity_scores(gold, predicted)
        return {"loss": nll.loss, **scores, "examples": len(gold), "words": nll.tokens}

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        """Predicted and gold tags of the first validation sentences."""
        gold, predicted, inputs, _ = self.tag_sequences(model, datamodule, "val", cfg["num_shown"])
        return SampleReport([Sample(tokenizer.decode(ids)[:SHOWN_CHARS], " ".join(p), " ".join(g))
                             for ids, p, g in zip(inputs, predicted, gold, strict=True)], {})
