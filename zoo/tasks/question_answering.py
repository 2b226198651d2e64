"""Extractive question answering (SQuAD v1.1): a qa head scores every token as an answer's start and end.
Long contexts are strided windows (zoo.data.qa); an example's answer is the best span over all its windows:
start <= end within data.max_answer_len tokens of the window's context, scored start + end logit, cut from
the context by the tokens' character offsets. Exact match and F1 as the SQuAD v1.1 script defines them
(zoo.tasks.metrics, 0-100): logged at validation by the exact_match callback, reported by evaluate.py."""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from typing import Any

import torch

from zoo.data.qa import ARRAYS, QADataModule, QADataset
from zoo.tasks.base import Task, register
from zoo.tasks.evaluating import EvalOptions, dataset, outputs
from zoo.tasks.metrics import TokenNLL, squad_exact_match, squad_f1
from zoo.tasks.samples import Sample, SampleReport

SHOWN_CHARS = 200  # characters of each sample's context printed


def best_span(start_logits: torch.Tensor, end_logits: torch.Tensor, valid: torch.Tensor,
              max_len: int) -> tuple[float, int, int]:
    """(score, start, end) of the span maximising start_logits[start] + end_logits[end] over start <= end <
    start + max_len with both ends `valid` (tokens of the context that spell characters); (-inf, 0, 0) when
    no span is allowed. All (T,) tensors; ties go to the earliest start, then the earliest end."""
    t = start_logits.shape[0]
    scores = start_logits.float()[:, None] + end_logits.float()[None, :]  # (T, T): [start, end]
    offset = torch.arange(t, device=scores.device)[None, :] - torch.arange(t, device=scores.device)[:, None]
    allowed = (offset >= 0) & (offset < max_len) & valid[:, None] & valid[None, :]
    if not bool(allowed.any()):
        return -math.inf, 0, 0
    flat = int(scores.masked_fill(~allowed, -math.inf).argmax())
    return float(scores.flatten()[flat]), flat // t, flat % t


@register
class QuestionAnswering(Task):
    name = "question_answering"
    archs = ("encoder", "decoder")
    head = "qa"
    user_data = "data=squad data.path=..."
    corpus_kind = "qa"
    perplexity = False
    has_references = True  # the gold answers: the exact_match callback logs val/exact_match and val/f1
    needed_specials = (("cls", "bos"), ("sep", "eos"))  # position 0 (no answer here) and the part ends
    reference_metrics = types.MappingProxyType({"exact_match": squad_exact_match, "f1": squad_f1})

    def datamodule(self, entry, loader: Mapping[str, Any], **common: Any) -> QADataModule:
        arrays = {s: {name: entry.arrays[f"{s}.{name}"] for name in ARRAYS} for s in ("train", "val")}
        return QADataModule(entry.tokenizer, arrays, doc_stride=loader.get("doc_stride"),
                            max_answer_len=loader.get("max_answer_len"), **common)

    def model_inputs(self, batch: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        """Everything but `window` (which window of which example a row is)."""
        return {k: v for k, v in batch.items() if k != "window"}

    def counted_labels(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """One (start, end) label per window: positions are (B,)."""
        positions = batch["start_positions"]
        return torch.tensor(positions.shape[0], device=positions.device)

    # ------------------------------------------------------------------------------- outputs
    def predict(self, model, datamodule, split: str, max_examples: int | None) -> tuple[list[str], TokenNLL]:
        """The predicted answer of each of the split's first `max_examples` examples, and the loss totals over
        their windows."""
        data: QADataset = dataset(datamodule, split)
        examples = data.examples
        n = len(examples) if max_examples is None else min(max_examples, len(examples))
        best = [(-math.inf, 0, 0)] * n  # example -> (score, first char, end char)
        nll, count, size = TokenNLL(), data.first_window[n], datamodule.batch_size
        windows = (datamodule.collate([data[k] for k in range(start, min(start + size, count))])
                   for start in range(0, count, size))  # the first `count` windows in order
        for batch, out in outputs(self, model, windows):
            nll.add(self.loss(out, batch), self.counted_labels(batch))
            for row, k in enumerate(batch["window"].tolist()):
                w, begin = data.windows[k], data.frame(k)[2]  # the window's context starts at `begin`
                spans = torch.as_tensor(examples.offsets(w.example)[w.start:w.end])  # (L, 2) characters
                score, i, j = best_span(out.start_logits[row, begin:begin + len(spans)].cpu(),
                                        out.end_logits[row, begin:begin + len(spans)].cpu(),
                                        spans[:, 1] > spans[:, 0], datamodule.max_answer_len)
                if score > best[w.example][0]:
                    best[w.example] = (score, int(spans[i, 0]), int(spans[j, 1]))
        return [examples.context_text(e)[a:b] for e, (_, a, b) in enumerate(best)], nll

    def references(self, model, tokenizer, datamodule, n: int) -> tuple[list[str], list[list[str]]]:
        """Predicted answers of the first `n` validation examples, and each one's gold answers."""
        predicted, _ = self.predict(model, datamodule, "val", n)
        examples = dataset(datamodule, "val").examples
        return predicted, [examples.answers(i) for i in range(len(predicted))]

    def evaluate(self, model, tokenizer, datamodule, split: str, options: EvalOptions) -> dict[str, float]:
        """SQuAD v1.1 exact match and F1 (percent, max over each example's gold answers) and the mean loss
        per window (the mean of the start and end cross-entropies)."""
        predicted, nll = self.predict(model, datamodule, split, options.max_examples)
        examples = dataset(datamodule, split).examples
        gold = [examples.answers(i) for i in range(len(predicted))]
        return {"loss": nll.loss, "exact_match": squad_exact_match(predicted, gold),
                "f1": squad_f1(predicted, gold), "examples": len(predicted), "windows": nll.tokens}

    def samples(self, model, tokenizer, datamodule, cfg: Mapping[str, Any]) -> SampleReport:
        """Question, context, predicted and first gold answer of the first validation examples."""
        predicted, _ = self.predict(model, datamodule, "val", cfg["num_shown"])
        examples = dataset(datamodule, "val").examples
        shown = [f"{tokenizer.decode(examples.question[i])} | {examples.context_text(i)[:SHOWN_CHARS]}"
                 for i in range(len(predicted))]
        return SampleReport([Sample(text, answer, examples.answers(i)[0])
                             for i, (text, answer) in enumerate(zip(shown, predicted, strict=True))], {})
