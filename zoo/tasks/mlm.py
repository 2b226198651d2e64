"""Masked language modelling: an encoder restores the picked tokens of text windows (BERT's 80/10/10);
samples show validation windows with the model's guesses filled in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.data.datamodules import MLMDataModule
from zoo.tasks.base import StreamTask, register
from zoo.tasks.evaluating import EvalOptions, first_val_logits, forward_batches
from zoo.tasks.metrics import TokenNLL
from zoo.tasks.samples import Sample, SampleReport
from zoo.utils import IGNORE_INDEX

SHOWN_TOKENS = 48  # tokens of each sample window printed


@register
class MaskedLanguageModelling(StreamTask):
    name = "mlm"
    archs = ("encoder",)
    builtin_data = "stdlib_text"
    needed_specials = (("eos", "sep"), ("mask",))

    def datamodule(self, entry, loader: Mapping[str, Any], **common: Any) -> MLMDataModule:
        mask_prob = loader.get("mask_prob")
        return MLMDataModule(entry.tokenizer, self.streams(entry),
                             mask_prob=0.15 if mask_prob is None else mask_prob,
                             blocks_per_epoch=loader.get("blocks_per_epoch"), shards=loader.get("shards"),
                             **common)

    def evaluate(self, model, tokenizer, datamodule, split: str, options: EvalOptions) -> dict[str, float]:
        """Masked-token accuracy (top guess = original token at the picked positions; the validation
        windows' picks are seeded, so every run scores the same positions), their NLL and perplexity."""
        nll, right = TokenNLL(), 0
        for batch, out in forward_batches(self, model, datamodule, split, options.max_examples):
            nll.add(self.loss(out, batch), self.counted_labels(batch))
            picked = batch["labels"] != IGNORE_INDEX
            right += int((out.logits.argmax(-1)[picked] == batch["labels"][picked]).sum())  # logits (B, T, V)
        return {"loss": nll.loss, "perplexity": nll.perplexity,
                "masked_accuracy": right / nll.tokens if nll.tokens else float("nan"), "tokens": nll.tokens}

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        """Fill the masked positions of a few validation windows with the model's top guess; report the
        fraction guessed right."""
        batch, logits = first_val_logits(model, datamodule, cfg["num_shown"])  # logits (B, T, V)
        ids, labels = batch["input_ids"], batch["labels"]
        picked = labels != IGNORE_INDEX
        filled = torch.where(picked, logits.argmax(-1), ids)
        truth = torch.where(picked, labels, ids)
        accuracy = float((filled[picked] == labels[picked]).float().mean()) if picked.any() else 0.0
        window = slice(0, min(SHOWN_TOKENS, ids.shape[1]))
        samples = [
            Sample(tokenizer.decode(ids[row, window], skip_special_tokens=False),
                   tokenizer.decode(filled[row, window]), tokenizer.decode(truth[row, window]))
            for row in range(len(ids))
        ]
        return SampleReport(samples, {"sample/masked_token_accuracy": accuracy})
