"""Sequence to sequence (translation): an encoder-decoder maps a source text to a target text. Supports
label smoothing; validation and test outputs are compared with their references (exact match)."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from zoo.data.datamodules import Seq2SeqDataModule
from zoo.tasks.base import Task, register
from zoo.tasks.evaluating import EvalOptions, dataset, forward_batches, generate_texts
from zoo.tasks.metrics import TokenNLL, bleu, chrf, exact_match
from zoo.tasks.samples import Sample, SampleReport, translate
from zoo.utils import IGNORE_INDEX


@register
class SequenceToSequence(Task):
    name = "seq2seq"
    archs = ("encoder_decoder",)
    builtin_data = "translation_toy"
    user_data = "data=pairs data.path=..."
    corpus_kind = "pairs"
    label_smoothing = True
    has_references = True
    needed_specials = (("eos",),)  # ends every target
    reference_metrics = types.MappingProxyType({"exact_match": exact_match, "bleu": bleu, "chrf": chrf})

    def datamodule(self, entry, loader: Mapping[str, Any], **common: Any) -> Seq2SeqDataModule:
        pairs = {s: (entry.arrays[f"{s}.src"], entry.arrays[f"{s}.tgt"]) for s in ("train", "val", "test")}
        test_pairs = [tuple(p) for p in entry.manifest.get("test_pairs", [])]
        return Seq2SeqDataModule(entry.tokenizer, pairs, test_pairs=test_pairs, **common)

    def training_loss(self, out, batch: Mapping[str, torch.Tensor], label_smoothing: float) -> torch.Tensor:
        if not label_smoothing:
            return out.loss
        logits = out.logits  # (B, T, V), aligned with the labels (the decoder inputs are shifted)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch["labels"].reshape(-1),
                               ignore_index=IGNORE_INDEX, label_smoothing=label_smoothing)

    def references(self, model, tokenizer, datamodule, n: int) -> tuple[list[str], list[str]]:
        """Greedy translations of the first `n` validation sources, and their targets."""
        dataset = datamodule.datasets.get("val")
        n = min(n, len(dataset))
        sources = [tokenizer.decode(dataset.src[i]) for i in range(n)]
        refs = [tokenizer.decode(dataset.tgt[i]) for i in range(n)]
        return translate(model, tokenizer, sources, max_new_tokens=model.config.max_seq_len), refs

    def evaluate(self, model, tokenizer, datamodule, split: str, options: EvalOptions) -> dict[str, float]:
        """Teacher-forced NLL and perplexity of the targets, then the sources decoded with the generation
        options (greedy by default, beam search with num_beams > 1) and scored against the targets: BLEU
        and chrF (sacrebleu) and exact match."""
        nll = TokenNLL()
        for batch, out in forward_batches(self, model, datamodule, split, options.max_examples):
            nll.add(self.loss(out, batch), self.counted_labels(batch))
        data = dataset(datamodule, split)
        n = len(data) if options.max_examples is None else min(options.max_examples, len(data))
        sources = [data.src[i][: model.config.max_seq_len].tolist() for i in range(n)]
        refs = [tokenizer.decode(data.tgt[i]) for i in range(n)]
        hyps = generate_texts(model, tokenizer, sources, options, datamodule.batch_size)
        return {"loss": nll.loss, "perplexity": nll.perplexity,
                **{name: fn(hyps, refs) for name, fn in self.reference_metrics.items()}, "examples": n}

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        """Translate the held-out test pairs (unseen combinations) with the final weights and report their
        exact match (the `test` callback evaluates the whole test split as test/<metric>)."""
        pairs = list(getattr(datamodule, "test_pairs", []))[: cfg["max_examples"]]
        if not pairs:
            return SampleReport([], {})
        sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
        hyps = translate(model, tokenizer, sources, max_new_tokens=model.config.max_seq_len)
        shown = [Sample(s, h, r) for s, h, r in zip(sources, hyps, refs, strict=True)][: cfg["num_shown"]]
        return SampleReport(shown, {"sample/exact_match": exact_match(hyps, refs)})
