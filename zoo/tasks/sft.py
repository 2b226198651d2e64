"""Supervised fine-tuning on chat data (``task=sft``): a decoder trained on conversations, prompt-completion
pairs or text (``data=chat``), the loss taken over the tokens ``data.loss_mask`` marks (the assistant's, by
default) and averaged over them, rows packed with their documents kept apart (zoo.data.chat_packing).
Metrics: the loss over trained tokens, token accuracy, trained tokens per step; samples: the model's reply
to validation conversations (rendered through the template up to the assistant's turn)."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import torch

from zoo.data.chat_packing import ChatDataModule
from zoo.tasks.base import register
from zoo.tasks.evaluating import forward_batches
from zoo.tasks.lm import LanguageModelling
from zoo.tasks.metrics import Accuracy, TokenNLL
from zoo.tasks.samples import Sample, SampleReport
from zoo.utils import IGNORE_INDEX


class TokenAccuracy(Accuracy):
    """Fraction of trained tokens whose arg-max is the next token (``targets``, already shifted)."""

    def update(self, out, batch: Mapping[str, torch.Tensor]) -> None:
        super().update(out, {"labels": batch["targets"]})


@register
class SupervisedFineTuning(LanguageModelling):
    name = "sft"
    archs = ("decoder",)
    auto = False
    builtin_data = None
    user_data = "data=chat data.path=conversations.jsonl"
    corpus_kind = "chat"
    needed_specials = ()  # the template writes its own turns; text rows end with eos when there is one
    # packed decoder windows with a per-token loss mask (several assistant turns per row) are no
    # source/target pair: an encoder-decoder trains on prompt/completion text with task=seq2seq
    instead = types.MappingProxyType({"encoder_decoder": (
        "fine-tune an encoder-decoder on prompt/completion pairs with task=seq2seq data=pairs "
        "data.path=pairs.jsonl data.src_field=prompt data.tgt_field=completion (plain text: chat turns are "
        "not rendered through a template for it)")})

    def with_epoch(self, data_cfg: dict[str, Any], examples_per_eval: int) -> dict[str, Any]:
        return data_cfg  # a finite set of packed windows: one epoch is one pass

    def datamodule(self, entry, loader: Mapping[str, Any], **common: Any) -> ChatDataModule:
        rows = {split: tuple(entry.arrays[f"{split}.{name}"] for name in ("ids", "mask", "line"))
                for split in ("train", "val")}
        return ChatDataModule(entry.tokenizer, rows, **common)

    def train_logs(self, out, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Token accuracy over this batch's trained tokens and their number."""
        targets = batch["targets"]
        trained = targets != IGNORE_INDEX
        right = ((out.logits.argmax(-1) == targets) & trained).sum()
        return {"token_accuracy": right / trained.sum().clamp(min=1), "trained_tokens": trained.sum().float()}

    def val_metrics(self, label_names=()) -> dict[str, Any]:
        return {"token_accuracy": TokenAccuracy()}

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        """The first `num_shown` validation rows up to their first trained token (a conversation rendered
        through the template, ending in the assistant's header), the model's sampled reply and the row's
        trained text as the reference."""
        rows, shown = datamodule.rows["val"], []
        for i in range(min(cfg["num_shown"], len(rows[0]))):
            ids, mask = rows[0][i].tolist(), rows[1][i].tolist()
            start = mask.index(1) if 1 in mask else len(ids)
            prompt = ids[:start] or [tokenizer.eos_id]
            decoding = {k: cfg[k] for k in ("max_new_tokens", "temperature", "top_k")}
            reply = model.generate([prompt], do_sample=True, seed=cfg["seed"] + i, **decoding)[0]
            shown.append(Sample(tokenizer.decode(prompt, skip_special_tokens=False),
                                tokenizer.decode(reply[len(prompt):]),
                                tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])))
        return SampleReport(shown, {})

    def evaluate(self, model, tokenizer, datamodule, split: str, options) -> dict[str, float]:
        """The loss and perplexity over the split's trained tokens, and token accuracy."""
        nll, accuracy = TokenNLL(), TokenAccuracy()
        for batch, out in forward_batches(self, model, datamodule, split, options.max_examples):
            nll.add(self.loss(out, batch), self.counted_labels(batch))
            accuracy.update(out, batch)
        return {"loss": nll.loss, "perplexity": nll.perplexity, "token_accuracy": float(accuracy.compute()),
                "tokens": nll.tokens}
